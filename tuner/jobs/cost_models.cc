#include "tuner/jobs/cost_models.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tuner/common/log.h"

namespace evotune {
namespace {

std::string DeviceKey(const DeviceInfo& d) {
  return absl::StrCat(d.name, "\x1f", d.cc_major, ".", d.cc_minor, "\x1f",
                      d.driver_version, "\x1f", d.nvrtc_version);
}

}  // namespace

DeviceLimits ServingLimits(const DeviceInfo& device) {
  if (device.limits.compute_capability != 0) return device.limits;
  DeviceLimits any;
  any.smem_per_block_bytes = int64_t{1} << 40;
  // Its architecture is known still: no template of another's instructions.
  any.compute_capability = device.cc_major * 10 + device.cc_minor;
  return any;
}

CostModels::CostModels(ResultStore* store, const TemplateRegistry* templates,
                       CostModelsOptions options)
    : store_(store),
      templates_(templates),
      options_(std::move(options)),
      features_(std::make_shared<FeatureMap>(*templates)) {}

CostModels::~CostModels() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void CostModels::Start() {
  thread_ = std::thread([this] {
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.poll)) {
      mu_.Unlock();
      if (absl::Status s = Refresh(); !s.ok()) {
        LogError(absl::StrCat("cost model: ", s.ToString()));
      }
      mu_.Lock();
    }
  });
}

std::shared_ptr<const ModelSnapshot> CostModels::Get(const DeviceInfo& device) {
  absl::MutexLock lock(&mu_);
  Entry& e = devices_[DeviceKey(device)];
  if (e.device.name.empty()) e.device = device;
  return e.snapshot;
}

absl::Status CostModels::Refresh() {
  absl::StatusOr<int64_t> last = store_->LastTrialId();
  if (!last.ok()) return last.status();
  std::vector<Entry> due;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, e] : devices_) {
      if (e.seen_trial != *last) due.push_back(e);
    }
  }
  for (const Entry& e : due) {
    absl::StatusOr<std::shared_ptr<const ModelSnapshot>> trained =
        Train(e.device, e.trained_on);
    if (!trained.ok()) return trained.status();
    absl::MutexLock lock(&mu_);
    Entry& current = devices_[DeviceKey(e.device)];
    current.seen_trial = *last;
    if (*trained != nullptr) {
      current.snapshot = *trained;
      current.trained_on = (*trained)->model->trained_samples();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ModelSnapshot>> CostModels::Train(
    const DeviceInfo& device, int64_t trained_on) {
  absl::StatusOr<std::vector<MeasuredTrial>> trials =
      store_->MeasuredTrials(device);
  if (!trials.ok()) return trials.status();
  const DeviceLimits limits = ServingLimits(device);
  std::vector<CostSample> samples;
  for (MeasuredTrial& m : *trials) {
    // Only the current version of a template: its geometry describes them.
    const KernelTemplate* t = templates_->Find(m.template_name);
    if (t == nullptr || t->hash != m.template_hash ||
        !CheckConfig(*t, m.config, m.problem, limits).ok()) {
      continue;
    }
    samples.push_back({t, std::move(m.config), m.problem, m.median_us});
  }
  const auto n = static_cast<int64_t>(samples.size());
  if (n < options_.min_trials ||
      (trained_on > 0 && n < trained_on * (1 + options_.retrain_growth))) {
    return nullptr;
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<CostModel>> model =
      CostModel::Train(features_, samples, limits, options_.model);
  if (!model.ok()) return model.status();
  LogInfo(absl::StrCat("cost model for ", device.name, ": trained on ", n,
                       " trials in ",
                       absl::FormatDuration(absl::Trunc(
                           absl::Now() - start, absl::Milliseconds(1)))));
  auto snapshot = std::make_shared<ModelSnapshot>();
  snapshot->device = device;
  snapshot->model = *std::move(model);
  snapshot->pool = TransferPool(samples, kTransferPoolPerProblem);
  absl::MutexLock lock(&mu_);
  snapshot->version = ++versions_;
  return snapshot;
}

}  // namespace evotune
