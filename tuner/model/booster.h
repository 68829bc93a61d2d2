// Booster: gradient-boosted trees (XGBoost, through its C API) over rows of
// float features, trained once and then predicting from many threads at
// once. CostModel holds two: one fitted to latencies, one to their order
// within a problem.
#ifndef EVOTUNE_TUNER_MODEL_BOOSTER_H_
#define EVOTUNE_TUNER_MODEL_BOOSTER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace evotune {

struct BoosterOptions {
  // XGBoost's learning objective: "reg:squarederror" fits the labels,
  // "rank:pairwise" their order within each group (higher label: ranked
  // higher).
  std::string objective = "reg:squarederror";
  int rounds = 500;
  int max_depth = 6;
  double learning_rate = 0.05;
  int threads = 2;  // For training; a prediction runs on its caller's thread.
  uint64_t seed = 1;
  // Copies of the trained booster that predict at once (each one call at a
  // time); 0: one per hardware thread, at most 8.
  int predictors = 0;
};

// Rows of `cols` features each, row after row; NaN for a missing value.
struct BoosterData {
  std::vector<float> values;
  size_t cols = 0;
  std::vector<float> labels;  // One per row.
  // For a ranking objective, the sizes of the groups its rows come in, in
  // order (consecutive rows); they add up to the rows. Empty: one group.
  std::vector<unsigned> groups;

  size_t rows() const { return cols == 0 ? 0 : values.size() / cols; }
};

class Booster {
 public:
  // INVALID_ARGUMENT without rows, with labels or groups not matching the
  // rows, or rounds < 1; INTERNAL with XGBoost's message if it fails.
  static absl::StatusOr<std::unique_ptr<Booster>> Train(
      const BoosterData& data, const BoosterOptions& options);

  ~Booster();
  Booster(const Booster&) = delete;
  Booster& operator=(const Booster&) = delete;

  // The prediction for each row of `values` (`cols` as trained), by the
  // first `trees` trees (all for 0 or more than there are).
  absl::StatusOr<std::vector<float>> Predict(const std::vector<float>& values,
                                             int trees = 0) const;

  int trees() const { return trees_; }

 private:
  // A booster handle with the lock that makes its calls one at a time
  // (XGBoost's prediction buffer belongs to the booster).
  struct Predictor {
    absl::Mutex mu;
    void* handle = nullptr;
  };

  Booster(void* handle, size_t cols, int trees);
  // Adds copies of the trained booster until there are `count`, all
  // predicting on one thread each.
  absl::Status AddPredictors(int count);
  // A predictor, locked: a free one if any, else the next in turn.
  Predictor* Acquire() const;

  std::vector<std::unique_ptr<Predictor>> predictors_;  // [0]: the trained.
  mutable std::atomic<size_t> next_{0};
  const size_t cols_;
  const int trees_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_MODEL_BOOSTER_H_
