#include "tuner/model/booster.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <thread>
#include <utility>

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
  absl::Status Create(const BoosterData& data) {
    if (XGDMatrixCreateFromMat(data.values.data(), data.rows(), data.cols,
                               kMissing, &handle_) != 0) {
      return XgbError("building the feature matrix");
    }
    if (XGDMatrixSetFloatInfo(handle_, "label", data.labels.data(),
                              data.labels.size()) != 0) {
      return XgbError("setting the labels");
    }
    if (!data.groups.empty() &&
        XGDMatrixSetUIntInfo(handle_, "group", data.groups.data(),
                             data.groups.size()) != 0) {
      return XgbError("setting the groups");
    }
    return absl::OkStatus();
  }
  DMatrixHandle handle() const { return handle_; }

 private:
  DMatrixHandle handle_ = nullptr;
};

absl::Status SetParams(BoosterHandle booster, const BoosterOptions& o) {
  const std::pair<const char*, std::string> params[] = {
      {"objective", o.objective},
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

absl::Status CheckData(const BoosterData& data, const BoosterOptions& o) {
  if (data.cols == 0 || data.rows() == 0) {
    return absl::InvalidArgumentError("cost model: no samples to train on");
  }
  if (data.values.size() % data.cols != 0 ||
      data.labels.size() != data.rows()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost model: ", data.labels.size(), " labels for ",
                     data.rows(), " rows of ", data.cols, " features"));
  }
  const uint64_t grouped =
      std::accumulate(data.groups.begin(), data.groups.end(), uint64_t{0});
  if (!data.groups.empty() && grouped != data.rows()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cost model: groups of ", grouped, " rows for ", data.rows()));
  }
  if (o.rounds < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost model: rounds must be at least 1, not ", o.rounds));
  }
  return absl::OkStatus();
}

}  // namespace

Booster::Booster(void* handle, size_t cols, int trees)
    : cols_(cols), trees_(trees) {
  predictors_.push_back(std::make_unique<Predictor>());
  predictors_[0]->handle = handle;
}

Booster::~Booster() {
  for (auto& p : predictors_) XGBoosterFree(p->handle);
}

absl::StatusOr<std::unique_ptr<Booster>> Booster::Train(
    const BoosterData& data, const BoosterOptions& options) {
  if (absl::Status s = CheckData(data, options); !s.ok()) return s;
  OwnedMatrix train;
  if (absl::Status s = train.Create(data); !s.ok()) return s;
  DMatrixHandle dmats[] = {train.handle()};
  BoosterHandle handle = nullptr;
  if (XGBoosterCreate(dmats, 1, &handle) != 0) return XgbError("creating");
  // From here the booster owns the handle and frees it on every path.
  std::unique_ptr<Booster> booster(
      new Booster(handle, data.cols, options.rounds));
  if (absl::Status s = SetParams(handle, options); !s.ok()) return s;
  for (int i = 0; i < options.rounds; ++i) {
    if (XGBoosterUpdateOneIter(handle, i, train.handle()) != 0) {
      return XgbError("training");
    }
  }
  const int predictors =
      options.predictors > 0
          ? options.predictors
          : static_cast<int>(
                std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  if (absl::Status s = booster->AddPredictors(predictors); !s.ok()) return s;
  return booster;
}

absl::Status Booster::AddPredictors(int count) {
  bst_ulong size = 0;
  const char* bytes = nullptr;
  if (XGBoosterSaveModelToBuffer(predictors_[0]->handle,
                                 R"({"format": "json"})", &size, &bytes) != 0) {
    return XgbError("saving the model");
  }
  const std::string model(bytes, size);  // The buffer is the booster's.
  while (static_cast<int>(predictors_.size()) < count) {
    auto p = std::make_unique<Predictor>();
    if (XGBoosterCreate(nullptr, 0, &p->handle) != 0) {
      return XgbError("creating a predictor");
    }
    predictors_.push_back(std::move(p));
    if (XGBoosterLoadModelFromBuffer(predictors_.back()->handle, model.data(),
                                     model.size()) != 0) {
      return XgbError("loading a predictor");
    }
  }
  for (auto& p : predictors_) {
    if (XGBoosterSetParam(p->handle, "nthread", "1") != 0) {
      return XgbError("setting a predictor's threads");
    }
  }
  return absl::OkStatus();
}

Booster::Predictor* Booster::Acquire() const {
  const size_t n = predictors_.size();
  const size_t first = next_.fetch_add(1, std::memory_order_relaxed) % n;
  for (size_t i = 0; i < n; ++i) {
    Predictor* p = predictors_[(first + i) % n].get();
    if (p->mu.TryLock()) return p;
  }
  predictors_[first]->mu.Lock();
  return predictors_[first].get();
}

absl::StatusOr<std::vector<float>> Booster::Predict(
    const std::vector<float>& values, int trees) const {
  const size_t rows = values.size() / cols_;
  if (rows == 0) return std::vector<float>{};
  // In place from the rows as they are (XGBoost's array interface): a
  // DMatrix would copy and index them first, several times the prediction.
  const std::string array =
      absl::StrCat(R"({"data": [)", reinterpret_cast<uintptr_t>(values.data()),
                   R"(, true], "shape": [)", rows, ", ", cols_,
                   R"(], "typestr": "<f4", "version": 3})");
  const std::string config = absl::StrCat(
      R"({"type": 0, "training": false, "cache_id": 0, "iteration_begin": 0, )",
      R"("iteration_end": )", trees > 0 && trees < trees_ ? trees : 0,
      R"(, "strict_shape": false, "missing": NaN})");
  Predictor* p = Acquire();
  const bst_ulong* shape = nullptr;
  bst_ulong dims = 0;
  const float* out = nullptr;
  const bool failed =
      XGBoosterPredictFromDense(p->handle, array.c_str(), config.c_str(),
                                nullptr, &shape, &dims, &out) != 0;
  std::vector<float> predicted;
  if (!failed) predicted.assign(out, out + rows);
  p->mu.Unlock();
  if (failed) return XgbError("predicting");
  return predicted;
}

}  // namespace evotune
