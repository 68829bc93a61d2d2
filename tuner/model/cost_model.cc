#include "tuner/model/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>

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

// The samples' rows, each on its own problem or, given one, on `asked`.
std::vector<float> FeatureMatrix(const FeatureMap& features,
                                 const std::vector<CostSample>& samples,
                                 const DeviceLimits& limits,
                                 const Problem* asked) {
  std::vector<float> values;
  values.reserve(samples.size() * features.size());
  for (const CostSample& s : samples) {
    features.Append(*s.t, s.config, asked != nullptr ? *asked : s.problem,
                    limits, &values);
  }
  return values;
}

// Per row of `values`, the natural log of its busiest multiprocessor's flops
// (FeatureMap::Log2Work): the model's labels are log(µs) less this, a cost
// per flop of the busiest multiprocessor, which carries over from the tuned
// problems to larger or smaller ones where a tree, which cannot extrapolate,
// would predict the latencies of the sizes it has seen.
std::vector<double> LogWork(const FeatureMap& features,
                            const std::vector<float>& values,
                            const DeviceLimits& limits) {
  const size_t cols = features.size();
  std::vector<double> out(values.size() / cols);
  for (size_t r = 0; r < out.size(); ++r) {
    out[r] = std::log(2.0) *
             features.Log2Work(&values[r * cols], limits.multiprocessors);
  }
  return out;
}

}  // namespace

CostModel::CostModel(std::shared_ptr<const FeatureMap> features,
                     DeviceLimits limits, void* booster,
                     int64_t trained_samples)
    : features_(std::move(features)),
      limits_(limits),
      trained_samples_(trained_samples) {
  predictors_.push_back(std::make_unique<Predictor>());
  predictors_[0]->booster = booster;
}

CostModel::~CostModel() {
  for (auto& p : predictors_) XGBoosterFree(p->booster);
}

absl::Status CostModel::AddPredictors(int count) {
  bst_ulong size = 0;
  const char* bytes = nullptr;
  if (XGBoosterSaveModelToBuffer(predictors_[0]->booster,
                                 R"({"format": "json"})", &size, &bytes) != 0) {
    return XgbError("saving the model");
  }
  const std::string model(bytes, size);  // The buffer is the booster's.
  while (static_cast<int>(predictors_.size()) < count) {
    auto p = std::make_unique<Predictor>();
    if (XGBoosterCreate(nullptr, 0, &p->booster) != 0) {
      return XgbError("creating a predictor");
    }
    predictors_.push_back(std::move(p));
    if (XGBoosterLoadModelFromBuffer(predictors_.back()->booster, model.data(),
                                     model.size()) != 0) {
      return XgbError("loading a predictor");
    }
  }
  for (auto& p : predictors_) {
    if (XGBoosterSetParam(p->booster, "nthread", "1") != 0) {
      return XgbError("setting a predictor's threads");
    }
  }
  return absl::OkStatus();
}

CostModel::Predictor* CostModel::Acquire() const {
  const size_t n = predictors_.size();
  const size_t first = next_.fetch_add(1, std::memory_order_relaxed) % n;
  for (size_t i = 0; i < n; ++i) {
    Predictor* p = predictors_[(first + i) % n].get();
    if (p->mu.TryLock()) return p;
  }
  predictors_[first]->mu.Lock();
  return predictors_[first].get();
}

absl::StatusOr<std::unique_ptr<CostModel>> CostModel::Train(
    std::shared_ptr<const FeatureMap> features,
    const std::vector<CostSample>& samples, const DeviceLimits& limits,
    const CostModelOptions& options) {
  if (samples.empty()) {
    return absl::InvalidArgumentError("cost model: no samples to train on");
  }
  const std::vector<float> values =
      FeatureMatrix(*features, samples, limits, nullptr);
  const std::vector<double> work = LogWork(*features, values, limits);
  std::vector<float> labels;
  for (size_t i = 0; i < samples.size(); ++i) {
    labels.push_back(
        static_cast<float>(std::log(samples[i].median_us) - work[i]));
  }
  OwnedMatrix train;
  if (absl::Status s = train.Create(values, features->size()); !s.ok()) {
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
  if (absl::Status s = SetParams(booster, options); !s.ok()) {
    return s;
  }
  for (int i = 0; i < options.rounds; ++i) {
    if (XGBoosterUpdateOneIter(booster, i, train.handle()) != 0) {
      return XgbError("training");
    }
  }
  const int predictors =
      options.predictors > 0
          ? options.predictors
          : static_cast<int>(
                std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  if (absl::Status s = model->AddPredictors(predictors); !s.ok()) return s;
  model->trees_ = options.rounds;
  return model;
}

absl::StatusOr<std::vector<double>> CostModel::PredictUs(
    const std::vector<CostSample>& samples, int trees) const {
  return Predict(FeatureMatrix(*features_, samples, limits_, nullptr), trees);
}

absl::StatusOr<std::vector<double>> CostModel::PredictUsOn(
    const Problem& problem, const std::vector<CostSample>& samples,
    int trees) const {
  return Predict(FeatureMatrix(*features_, samples, limits_, &problem), trees);
}

absl::StatusOr<std::vector<double>> CostModel::Predict(
    const std::vector<float>& values, int trees) const {
  const size_t rows = values.size() / features_->size();
  if (rows == 0) return std::vector<double>{};
  // In place from the rows as they are (XGBoost's array interface): a
  // DMatrix would copy and index them first, several times the prediction.
  const std::string array =
      absl::StrCat(R"({"data": [)", reinterpret_cast<uintptr_t>(values.data()),
                   R"(, true], "shape": [)", rows, ", ", features_->size(),
                   R"(], "typestr": "<f4", "version": 3})");
  const std::string config = absl::StrCat(
      R"({"type": 0, "training": false, "cache_id": 0, "iteration_begin": 0, )",
      R"("iteration_end": )", trees > 0 && trees < trees_ ? trees : 0,
      R"(, "strict_shape": false, "missing": NaN})");
  const std::vector<double> work = LogWork(*features_, values, limits_);
  Predictor* p = Acquire();
  const bst_ulong* shape = nullptr;
  bst_ulong dims = 0;
  const float* out = nullptr;
  const bool failed =
      XGBoosterPredictFromDense(p->booster, array.c_str(), config.c_str(),
                                nullptr, &shape, &dims, &out) != 0;
  std::vector<double> us;
  us.reserve(rows);
  for (size_t i = 0; !failed && i < rows; ++i) {
    us.push_back(std::exp(out[i] + work[i]));
  }
  p->mu.Unlock();
  if (failed) return XgbError("predicting");
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
