// CostModel: predicts a config's median latency on a problem from the trials
// measured on one device, with gradient-boosted trees (XGBoost, through its C
// API) over FeatureMap's features, fitted to log(median_us) less the log of
// the flops its busiest multiprocessor computes (FeatureMap::Log2Work).
//
// It serves two uses: ranking the configs tuned for other problems on a
// problem never tuned (transfer), and screening a search's candidates so
// that the ones predicted fastest are measured first. For the screen a
// second model beside it, trained on the same samples with a ranking
// objective, learns the order of configs within a problem. Thread-safe;
// immutable after Train.
#ifndef EVOTUNE_TUNER_MODEL_COST_MODEL_H_
#define EVOTUNE_TUNER_MODEL_COST_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/model/booster.h"
#include "tuner/model/features.h"

namespace evotune {

// One config of a template on a problem; median_us is the measured latency
// (training) and is ignored for prediction.
struct CostSample {
  const KernelTemplate* t = nullptr;
  Config config;
  Problem problem;
  double median_us = 0;
};

struct CostModelOptions {
  // Both models' boosting (the order model's objective is its own).
  BoosterOptions booster;
  // Whether to train the order model beside the latency model (see
  // ScreenUs; as many rounds, and the training takes about 2.5 times as
  // long); without it ScreenUs is PredictUs.
  bool order_model = true;
  // How much the order model corrects the latency model in ScreenUs.
  double order_weight = 0.1;
};

class CostModel {
 public:
  // Fits the samples (all with median_us > 0, each config passing
  // CheckConfig for its problem on `limits`). INVALID_ARGUMENT without
  // samples; INTERNAL with XGBoost's message if it fails.
  static absl::StatusOr<std::unique_ptr<CostModel>> Train(
      std::shared_ptr<const FeatureMap> features,
      const std::vector<CostSample>& samples, const DeviceLimits& limits,
      const CostModelOptions& options = {});

  ~CostModel();
  CostModel(const CostModel&) = delete;
  CostModel& operator=(const CostModel&) = delete;

  // Predicted median latency (µs) of each sample, on the device trained for;
  // with `trees` > 0 by the first that many trees only (a coarser, cheaper
  // estimate; all of them when the model has no more).
  absl::StatusOr<std::vector<double>> PredictUs(
      const std::vector<CostSample>& samples, int trees = 0) const;
  // The same for each sample's config and template on `problem` instead of
  // its own (ranking configs measured elsewhere, without copying them).
  absl::StatusOr<std::vector<double>> PredictUsOn(
      const Problem& problem, const std::vector<CostSample>& samples,
      int trees = 0) const;

  // What a search screens with: samples all of one template on one problem
  // (the candidates of a screen), each PredictUs corrected by the order
  // model, a ranking of configs within a problem learnt from the trained
  // problems' orders: x exp(-order_weight z), z the sample's order score
  // standardised over `samples` (mean 0, standard deviation 1; higher:
  // ranked faster). The latency model's error varies from config to config;
  // what a screen needs is the order among its candidates, which the order
  // model learns directly.
  absl::StatusOr<std::vector<double>> ScreenUs(
      const std::vector<CostSample>& samples) const;

  int64_t trained_samples() const { return trained_samples_; }
  const DeviceLimits& limits() const { return limits_; }

 private:
  CostModel(std::shared_ptr<const FeatureMap> features, DeviceLimits limits,
            int64_t trained_samples, double order_weight);
  // Predicted µs of rows of features_->size() values, by the first `trees`
  // trees (all for 0).
  absl::StatusOr<std::vector<double>> Predict(const std::vector<float>& values,
                                              int trees) const;

  const std::shared_ptr<const FeatureMap> features_;
  const DeviceLimits limits_;
  const int64_t trained_samples_;
  const double order_weight_;
  // Fitted to log(µs) less the log of the busiest multiprocessor's work.
  std::unique_ptr<Booster> latency_;
  // Ranks configs within a template and problem; null without one.
  std::unique_ptr<Booster> order_;
};

// What a search screens with (LatencyPredictor, tuner/search): the model's
// ScreenUs of each config of `t` on `problem`, in order;
// all 0 (alike, so a screen keeps the first drawn) when it cannot predict.
// Holds `model` (and, through an aliasing pointer, whatever owns it).
std::function<std::vector<double>(const std::vector<Config>&)> ConfigPredictor(
    std::shared_ptr<const CostModel> model, const KernelTemplate* t,
    const Problem& problem);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_MODEL_COST_MODEL_H_
