#include "runtime/admission/load.hpp"

#include <algorithm>

namespace dynrt::admission {

namespace {
double nanos(Duration d) {
  return static_cast<double>(d.count());
}
}  // namespace

LoadEnvelope::LoadEnvelope(Duration horizon)
    : horizon_(horizon > Duration::zero() ? horizon : Duration(1)) {}

void LoadEnvelope::observe(TimePoint t, const LoadView& view) {
  latest_ = view;
  if (!samples_.empty()) {
    const Sample& last = samples_.back();
    t = std::max(t, last.at);
    area_ += last.rho * nanos(t - last.at);
  }
  if (!samples_.empty() && samples_.back().at == t) {
    samples_.back().rho = view.rho;  // the later reading at the same instant wins
  } else {
    samples_.push_back(Sample{t, view.rho});
  }
  empty_ = false;
  trim(t);
}

// Drops segments that ended before the window of any query at or after t can begin.
void LoadEnvelope::trim(TimePoint t) {
  const TimePoint start = t - horizon_;
  while (samples_.size() >= 2 && samples_[1].at <= start) {
    area_ -= samples_[0].rho * nanos(samples_[1].at - samples_[0].at);
    samples_.pop_front();
  }
}

double LoadEnvelope::mean(TimePoint t) const {
  if (samples_.empty()) return 0;
  const Sample& last = samples_.back();
  t = std::max(t, last.at);
  const TimePoint start = t - horizon_;
  if (start >= last.at) return last.rho;  // the whole window lies in the last segment
  // Area from the first sample to t, minus whatever lies before the window.
  double area = area_ + last.rho * nanos(t - last.at);
  TimePoint from = samples_.front().at;
  for (std::size_t i = 0; i + 1 < samples_.size() && samples_[i].at < start; ++i) {
    const TimePoint seg_end = std::min(samples_[i + 1].at, start);
    area -= samples_[i].rho * nanos(seg_end - samples_[i].at);
    from = seg_end;
  }
  const double covered = nanos(t - std::max(from, start));
  if (covered <= 0) return last.rho;
  return area / covered;
}

double LoadEnvelope::envelope(TimePoint t) const {
  if (empty_) return 0;
  return std::max(latest_.rho, mean(t));  // Eq. 3
}

LoadView LoadEnvelope::view(TimePoint t) const {
  LoadView v = latest_;
  v.rho = envelope(t);
  return v;
}

}  // namespace dynrt::admission
