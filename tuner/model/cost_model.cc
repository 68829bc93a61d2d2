#include "tuner/model/cost_model.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "xgboost/c_api.h"

namespace evotune {
namespace {

constexpr float kMissing = std::numeric_limits<float>::quiet_NaN();

absl::Status XgbError(const char* what) {
  return absl::InternalError(
      absl::StrCat("cost model: ", what, ": ", XGBGetLastError()));
}

// Owns a DMatrix.
class OwnedMatrix {
 public:
  ~OwnedMatrix() {
    if (handle_ != nullptr) XGDMatrixFree(handle_);
  }
  absl::Status Create(const std::vector<float>& values, size_t cols) {
    if (XGDMatrixCreateFromMat(values.data(), values.size() / cols, cols,
                               kMissing, &handle_) != 0) {
      return XgbError("building the feature matrix");
    }
    return absl::OkStatus();
  }
  DMatrixHandle handle() const { return handle_; }

 private:
  DMatrixHandle handle_ = nullptr;
};

absl::Status SetParams(BoosterHandle booster, const CostModelOptions& o) {
  const std::pair<const char*, std::string> params[] = {
      {"objective", "reg:squarederror"},
      {"tree_method", "hist"},
      {"max_depth", std::to_string(o.max_depth)},
      {"eta", std::to_string(o.learning_rate)},
      {"nthread", std::to_string(o.threads)},
      {"seed", std::to_string(o.seed)},
      {"verbosity", "0"},
  };
  for (const auto& [name, value] : params) {
    if (XGBoosterSetParam(booster, name, value.c_str()) != 0) {
      return XgbError(name);
    }
  }
  return absl::OkStatus();
}

std::vector<float> FeatureMatrix(const FeatureMap& features,
                                 const std::vector<CostSample>& samples,
                                 const DeviceLimits& limits) {
  std::vector<float> values;
  values.reserve(samples.size() * features.size());
  for (const CostSample& s : samples) {
    features.Append(*s.t, s.config, s.problem, limits, &values);
  }
  return values;
}

}  // namespace

CostModel::CostModel(std::shared_ptr<const FeatureMap> features,
                     DeviceLimits limits, void* booster,
                     int64_t trained_samples)
    : features_(std::move(features)),
      limits_(limits),
      booster_(booster),
      trained_samples_(trained_samples) {}

CostModel::~CostModel() { XGBoosterFree(booster_); }

absl::StatusOr<std::unique_ptr<CostModel>> CostModel::Train(
    std::shared_ptr<const FeatureMap> features,
    const std::vector<CostSample>& samples, const DeviceLimits& limits,
    const CostModelOptions& options) {
  if (samples.empty()) {
    return absl::InvalidArgumentError("cost model: no samples to train on");
  }
  std::vector<float> labels;
  for (const CostSample& s : samples) {
    labels.push_back(static_cast<float>(std::log(s.median_us)));
  }
  OwnedMatrix train;
  if (absl::Status s = train.Create(FeatureMatrix(*features, samples, limits),
                                    features->size());
      !s.ok()) {
    return s;
  }
  if (XGDMatrixSetFloatInfo(train.handle(), "label", labels.data(),
                            labels.size()) != 0) {
    return XgbError("setting the labels");
  }
  DMatrixHandle dmats[] = {train.handle()};
  BoosterHandle booster = nullptr;
  if (XGBoosterCreate(dmats, 1, &booster) != 0) return XgbError("creating");
  // From here the model owns the booster and frees it on every path.
  std::unique_ptr<CostModel> model(
      new CostModel(std::move(features), limits, booster,
                    static_cast<int64_t>(samples.size())));
  if (absl::Status s = SetParams(booster, options); !s.ok()) return s;
  for (int i = 0; i < options.rounds; ++i) {
    if (XGBoosterUpdateOneIter(booster, i, train.handle()) != 0) {
      return XgbError("training");
    }
  }
  return model;
}

absl::StatusOr<std::vector<double>> CostModel::PredictUs(
    const std::vector<CostSample>& samples) const {
  if (samples.empty()) return std::vector<double>{};
  OwnedMatrix m;
  if (absl::Status s = m.Create(FeatureMatrix(*features_, samples, limits_),
                                features_->size());
      !s.ok()) {
    return s;
  }
  absl::MutexLock lock(&mu_);
  bst_ulong n = 0;
  const float* out = nullptr;
  if (XGBoosterPredict(booster_, m.handle(), 0, 0, 0, &n, &out) != 0) {
    return XgbError("predicting");
  }
  std::vector<double> us;
  us.reserve(n);
  for (bst_ulong i = 0; i < n; ++i) us.push_back(std::exp(out[i]));
  return us;
}

std::function<std::vector<double>(const std::vector<Config>&)> ConfigPredictor(
    std::shared_ptr<const CostModel> model, const KernelTemplate* t,
    const Problem& problem) {
  return [model, t, problem](const std::vector<Config>& configs) {
    std::vector<CostSample> samples;
    for (const Config& c : configs) samples.push_back({t, c, problem, 0});
    absl::StatusOr<std::vector<double>> us = model->PredictUs(samples);
    return us.ok() ? *std::move(us) : std::vector<double>(configs.size(), 0);
  };
}

}  // namespace evotune
