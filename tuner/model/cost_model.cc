#include "tuner/model/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>

#include "core/problem.h"

namespace evotune {
namespace {

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

// The latency model's data: labels log(µs) less LogWork.
BoosterData LatencyData(const FeatureMap& features, std::vector<float> values,
                        const std::vector<CostSample>& samples,
                        const DeviceLimits& limits) {
  BoosterData data;
  const std::vector<double> work = LogWork(features, values, limits);
  for (size_t i = 0; i < samples.size(); ++i) {
    data.labels.push_back(
        static_cast<float>(std::log(samples[i].median_us) - work[i]));
  }
  data.values = std::move(values);
  data.cols = features.size();
  return data;
}

// The order model's data: the rows grouped by template and problem, labels
// -log(µs) (faster ranks higher).
BoosterData OrderData(const std::vector<float>& values, size_t cols,
                      const std::vector<CostSample>& samples) {
  std::vector<std::pair<std::string, std::string>> keys;
  for (const CostSample& s : samples) {
    keys.emplace_back(s.t->name, ProblemKey(s.problem));
  }
  std::vector<size_t> order(samples.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  BoosterData data;
  data.cols = cols;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    data.values.insert(data.values.end(), values.begin() + i * cols,
                       values.begin() + (i + 1) * cols);
    data.labels.push_back(static_cast<float>(-std::log(samples[i].median_us)));
    if (k == 0 || keys[i] != keys[order[k - 1]]) data.groups.push_back(0);
    ++data.groups.back();
  }
  return data;
}

// `scores` less their mean, over their standard deviation; all 0 when they
// are alike.
std::vector<double> Standardised(const std::vector<float>& scores) {
  const double n = static_cast<double>(scores.size());
  const double mean = std::accumulate(scores.begin(), scores.end(), 0.0) / n;
  double squares = 0;
  for (float s : scores) squares += (s - mean) * (s - mean);
  const double sd = std::sqrt(squares / n);
  std::vector<double> z(scores.size(), 0);
  if (sd <= 1e-12) return z;
  for (size_t i = 0; i < z.size(); ++i) z[i] = (scores[i] - mean) / sd;
  return z;
}

}  // namespace

CostModel::CostModel(std::shared_ptr<const FeatureMap> features,
                     DeviceLimits limits, int64_t trained_samples,
                     double order_weight)
    : features_(std::move(features)),
      limits_(limits),
      trained_samples_(trained_samples),
      order_weight_(order_weight) {}

CostModel::~CostModel() = default;

absl::StatusOr<std::unique_ptr<CostModel>> CostModel::Train(
    std::shared_ptr<const FeatureMap> features,
    const std::vector<CostSample>& samples, const DeviceLimits& limits,
    const CostModelOptions& options) {
  if (samples.empty()) {
    return absl::InvalidArgumentError("cost model: no samples to train on");
  }
  std::unique_ptr<CostModel> model(
      new CostModel(features, limits, static_cast<int64_t>(samples.size()),
                    options.order_weight));
  std::vector<float> values =
      FeatureMatrix(*features, samples, limits, nullptr);
  if (options.order_model) {
    BoosterOptions o = options.booster;
    o.objective = "rank:pairwise";
    absl::StatusOr<std::unique_ptr<Booster>> order =
        Booster::Train(OrderData(values, features->size(), samples), o);
    if (!order.ok()) return order.status();
    model->order_ = *std::move(order);
  }
  absl::StatusOr<std::unique_ptr<Booster>> latency =
      Booster::Train(LatencyData(*features, std::move(values), samples, limits),
                     options.booster);
  if (!latency.ok()) return latency.status();
  model->latency_ = *std::move(latency);
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

absl::StatusOr<std::vector<double>> CostModel::ScreenUs(
    const std::vector<CostSample>& samples) const {
  const std::vector<float> values =
      FeatureMatrix(*features_, samples, limits_, nullptr);
  absl::StatusOr<std::vector<double>> us = Predict(values, 0);
  if (!us.ok() || order_ == nullptr || us->size() < 2) return us;
  absl::StatusOr<std::vector<float>> scores = order_->Predict(values);
  if (!scores.ok()) return scores.status();
  const std::vector<double> z = Standardised(*scores);
  for (size_t i = 0; i < us->size(); ++i) {
    (*us)[i] *= std::exp(-order_weight_ * z[i]);
  }
  return us;
}

absl::StatusOr<std::vector<double>> CostModel::Predict(
    const std::vector<float>& values, int trees) const {
  absl::StatusOr<std::vector<float>> out = latency_->Predict(values, trees);
  if (!out.ok()) return out.status();
  const std::vector<double> work = LogWork(*features_, values, limits_);
  std::vector<double> us(out->size());
  for (size_t i = 0; i < us.size(); ++i) us[i] = std::exp((*out)[i] + work[i]);
  return us;
}

std::function<std::vector<double>(const std::vector<Config>&)> ConfigPredictor(
    std::shared_ptr<const CostModel> model, const KernelTemplate* t,
    const Problem& problem) {
  return [model, t, problem](const std::vector<Config>& configs) {
    std::vector<CostSample> samples;
    for (const Config& c : configs) samples.push_back({t, c, problem, 0});
    absl::StatusOr<std::vector<double>> us = model->ScreenUs(samples);
    return us.ok() ? *std::move(us) : std::vector<double>(configs.size(), 0);
  };
}

}  // namespace evotune
