// A vector of trivially copyable values for the CSL's per-entry lists (reads, producers,
// consumers, readers of a record), where most lists hold zero or one element and a million
// entries make every byte count. One element lives inline, in the space the heap pointer
// would take; more spill to the heap. Size and capacity are 32-bit. Unordered removal only.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace dynrt::csl {

template <class T>
class CompactVec {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  CompactVec() = default;
  CompactVec(const CompactVec&) = delete;
  CompactVec& operator=(const CompactVec&) = delete;
  CompactVec(CompactVec&& o) noexcept { take(o); }
  CompactVec& operator=(CompactVec&& o) noexcept {
    if (this != &o) {
      clear();
      take(o);
    }
    return *this;
  }
  ~CompactVec() { clear(); }

  std::uint32_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T& operator[](std::uint32_t i) { return data()[i]; }
  const T& operator[](std::uint32_t i) const { return data()[i]; }

  void push_back(const T& v) {
    if (capacity_ == 0 && size_ == 0) {
      store_.one = v;  // the inline slot
      size_ = 1;
      return;
    }
    if (size_ == capacity()) grow();
    data()[size_++] = v;
  }
  // Moves the last element into slot i.
  void erase_unordered(std::uint32_t i) {
    --size_;
    if (i != size_) data()[i] = data()[size_];
  }
  void clear() {
    if (capacity_ > 0) std::free(store_.heap);
    store_.heap = nullptr;
    size_ = capacity_ = 0;
  }

 private:
  bool inline_mode() const { return capacity_ == 0; }
  std::uint32_t capacity() const { return inline_mode() ? 1 : capacity_; }
  T* data() { return inline_mode() ? &store_.one : store_.heap; }
  const T* data() const { return inline_mode() ? &store_.one : store_.heap; }

  void grow() {
    const std::uint32_t cap = capacity() * 2;
    T* p = static_cast<T*>(std::malloc(sizeof(T) * cap));
    if (!p) throw std::bad_alloc();
    std::memcpy(static_cast<void*>(p), data(), sizeof(T) * size_);
    if (!inline_mode()) std::free(store_.heap);
    store_.heap = p;
    capacity_ = cap;
  }

  void take(CompactVec& o) {
    std::memcpy(static_cast<void*>(&store_), &o.store_, sizeof(store_));
    size_ = std::exchange(o.size_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
    o.store_.heap = nullptr;
  }

  union Store {
    T* heap;
    T one;
  } store_{nullptr};
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = 0;  // 0: the element, if any, is inline
};

}  // namespace dynrt::csl
