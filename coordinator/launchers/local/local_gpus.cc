#include "coordinator/launchers/local/local_gpus.h"

#include <algorithm>
#include <sstream>

namespace shardd {

std::vector<int> SurvivingOrdinals(const std::vector<int>& job_gpus, const std::vector<std::string>& baseline,
                                   const std::vector<std::string>& now) {
  std::vector<int> out;
  for (int g : job_gpus) {
    if (g < 0 || g >= static_cast<int>(baseline.size()) || baseline[g].empty()) continue;
    auto it = std::find(now.begin(), now.end(), baseline[g]);
    if (it != now.end()) out.push_back(static_cast<int>(it - now.begin()));
  }
  return out;
}

LocalGpuWatch::LocalGpuWatch(StatusOr<std::vector<std::string>> baseline, GpuIdProbe probe,
                             std::function<int64_t()> now_ms, int64_t min_interval_ms)
    : baseline_(std::move(baseline)), probe_(std::move(probe)), now_ms_(std::move(now_ms)),
      min_interval_ms_(min_interval_ms) {}

StatusOr<std::vector<int>> LocalGpuWatch::Surviving(const std::vector<int>& job_gpus) {
  if (!baseline_.ok())
    return shard::FailedPrecondition("the GPUs were not probed at the coordinator's start: " +
                                     baseline_.status().message());
  for (int g : job_gpus)
    if (g < 0 || g >= static_cast<int>(baseline_->size()) || (*baseline_)[g].empty())
      return shard::FailedPrecondition("GPU " + std::to_string(g) +
                                       " has no PCI bus id from the probe at the coordinator's start");
  const int64_t now = now_ms_();
  if (!probed_ || now - probed_ms_ >= min_interval_ms_) {
    last_ = probe_();
    probed_ = true;
    probed_ms_ = now;
  }
  if (!last_.ok()) return shard::Unavailable("GPU probe failed: " + last_.status().message());
  return SurvivingOrdinals(job_gpus, *baseline_, *last_);
}

std::string DeviceList(const std::vector<int>& gpus) {
  std::string s;
  for (size_t i = 0; i < gpus.size(); ++i) s += (i ? "," : "") + std::to_string(gpus[i]);
  return s;
}

StatusOr<std::vector<int>> ParseDeviceList(const std::string& text) {
  std::vector<int> out;
  if (text.empty()) return out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 6)
      return shard::InvalidArgument("CUDA_VISIBLE_DEVICES '" + text + "' is not a list of device ordinals");
    out.push_back(std::stoi(item));
  }
  return out;
}

}  // namespace shardd
