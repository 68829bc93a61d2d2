// FeatureMap: the numbers a cost model sees for one config of a template on
// one problem and device. Every template's rows share one layout, so that one
// model learns from all of them:
//
//   - the template (its index in the registry, a category to the trees);
//   - the problem: batch, heads, GQA group, query and key lengths (log2),
//     head_dim, causal, dtype, its flops and the bytes it must read (log2);
//   - every parameter of every template, by name (missing, NaN, where the
//     template lacks it);
//   - the launch the template's geometry gives: blocks, threads, shared
//     memory, blocks per multiprocessor, waves over the multiprocessors and
//     how full the last wave is, work per block, persistence, cluster size
//     and split-KV scratch; how full the query tiles are, and how the work
//     falls on the multiprocessors (sm_load.h: the busiest one's flops and
//     its load over the average); how often the tiles read each K/V element
//     and how many blocks per multiprocessor they make before a KV split.
#ifndef EVOTUNE_TUNER_MODEL_FEATURES_H_
#define EVOTUNE_TUNER_MODEL_FEATURES_H_

#include <map>
#include <string>
#include <vector>

#include "kernel_templates/template_registry.h"

namespace evotune {

class FeatureMap {
 public:
  explicit FeatureMap(const TemplateRegistry& templates);

  int size() const { return static_cast<int>(names_.size()); }
  const std::vector<std::string>& names() const { return names_; }
  // log2 of the flops the busiest multiprocessor computes, read from a row
  // of Append's values: its `log2_sm_flops`, or where the template does not
  // give its tile rows the problem's flops spread over `multiprocessors`.
  // The figure a latency grows with, whatever the problem's size: a cost
  // model fits latency relative to it.
  double Log2Work(const float* row, int multiprocessors) const;

  // Appends size() values. `config` must pass CheckConfig for `problem`;
  // unknown device figures (0 multiprocessors) give NaN where they matter.
  void Append(const KernelTemplate& t, const Config& config,
              const Problem& problem, const DeviceLimits& limits,
              std::vector<float>* out) const;

 private:
  std::map<std::string, int> template_index_;
  std::vector<std::string> params_;  // Every template's, sorted, unique.
  std::vector<std::string> names_;
  int sm_flops_column_ = 0;  // Of log2_sm_flops and log2_flops.
  int flops_column_ = 0;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_MODEL_FEATURES_H_
