// An engine whose completions the test controls: submit() holds each request until the test
// releases it (to the wrapped engine, which then answers exactly as it would have) or fails it
// with an error of its choosing; cancel() of a held request answers it `cancelled`. It counts
// what was submitted, and a test waits for a number of held requests on a condition variable
// (an event, not a time).
#pragma once

#include "engines/engine.hpp"

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace dynrt::testing {

class HoldEngine final : public engines::Engine {
 public:
  explicit HoldEngine(std::shared_ptr<engines::Engine> inner) : inner_(std::move(inner)) {}

  engines::RequestHandle submit(engines::EngineRequest request,
                                std::shared_ptr<engines::ResponseSink> sink) override {
    std::lock_guard lock(mutex_);
    const auto h = next_++;
    held_.emplace(h, Held{std::move(request), std::move(sink)});
    ++submitted_;
    changed_.notify_all();
    return h;
  }
  void cancel(engines::RequestHandle handle) override {
    std::shared_ptr<engines::ResponseSink> sink;
    engines::RequestHandle forwarded = 0;
    {
      std::lock_guard lock(mutex_);
      if (auto it = held_.find(handle); it != held_.end()) {
        sink = std::move(it->second.sink);
        held_.erase(it);
        changed_.notify_all();
      } else if (auto f = forwarded_.find(handle); f != forwarded_.end()) {
        forwarded = f->second;
      }
    }
    if (sink) sink->on_error({engines::ErrorKind::cancelled, 0, {}, "cancelled"});
    if (forwarded != 0) inner_->cancel(forwarded);
  }
  engines::LoadSnapshot load() const override { return inner_->load(); }
  std::string name() const override { return "hold"; }

  // Blocks until `n` requests are held.
  void wait_held(std::size_t n) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return held_.size() >= n; });
  }
  std::size_t held() const {
    std::lock_guard lock(mutex_);
    return held_.size();
  }
  std::size_t submitted() const {
    std::lock_guard lock(mutex_);
    return submitted_;
  }
  // Every held request goes to the wrapped engine.
  void release_all() { forward(take()); }
  // The oldest held request (the first submitted of those held) goes to the wrapped engine.
  void release_first() {
    std::map<engines::RequestHandle, Held> first;
    {
      std::lock_guard lock(mutex_);
      if (held_.empty()) return;
      first.insert(held_.extract(held_.begin()));
      changed_.notify_all();
    }
    forward(std::move(first));
  }
  // The held requests of `kind` go to the wrapped engine; returns how many.
  std::size_t release_kind(engines::RequestKind kind) {
    std::map<engines::RequestHandle, Held> picked;
    {
      std::lock_guard lock(mutex_);
      for (auto it = held_.begin(); it != held_.end();) {
        if (it->second.request.kind == kind) {
          picked.insert(held_.extract(it++));
        } else {
          ++it;
        }
      }
      changed_.notify_all();
    }
    const auto n = picked.size();
    forward(std::move(picked));
    return n;
  }
  // Blocks until `n` requests of `kind` are held.
  void wait_held(engines::RequestKind kind, std::size_t n) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] {
      std::size_t k = 0;
      for (const auto& [h, held] : held_)
        k += held.request.kind == kind ? 1 : 0;
      return k >= n;
    });
  }
  // Blocks until nothing is held.
  void wait_empty() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return held_.empty(); });
  }
  // Every held request fails with `error`.
  void fail_all(const engines::EngineError& error) {
    for (auto& [h, held] : take())
      held.sink->on_error(error);
  }

 private:
  struct Held {
    engines::EngineRequest request;
    std::shared_ptr<engines::ResponseSink> sink;
  };
  // Sends `held` on to the wrapped engine, remembering each one's handle there (for cancel).
  void forward(std::map<engines::RequestHandle, Held> held) {
    for (auto& [h, request] : held) {
      const auto inner = inner_->submit(std::move(request.request), request.sink);
      std::lock_guard lock(mutex_);
      forwarded_[h] = inner;
    }
  }
  std::map<engines::RequestHandle, Held> take() {
    std::lock_guard lock(mutex_);
    auto out = std::move(held_);
    held_.clear();
    changed_.notify_all();
    return out;
  }

  std::shared_ptr<engines::Engine> inner_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<engines::RequestHandle, Held> held_;
  std::map<engines::RequestHandle, engines::RequestHandle> forwarded_;
  engines::RequestHandle next_ = 1;
  std::size_t submitted_ = 0;
};

}  // namespace dynrt::testing
