// Transfer: serving a problem that was never tuned with configs tuned for
// other problems, ranked by a cost model's prediction for the asked problem.
#ifndef EVOTUNE_TUNER_MODEL_TRANSFER_H_
#define EVOTUNE_TUNER_MODEL_TRANSFER_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/model/cost_model.h"

namespace evotune {

// A measured config of a tuned problem (`sample.problem`): a candidate for
// serving another problem.
using TransferCandidate = CostSample;

struct RankedTransfer {
  TransferCandidate candidate;
  double predicted_us = 0;  // On the asked problem.
  // A config its template fits to the asked problem
  // (KernelTemplate::fitted_defaults), never measured: candidate.problem is
  // the asked problem, candidate.median_us 0.
  bool fitted = false;
};

// The config the best-ranked candidate's template fits to the asked problem
// is served first unless the model predicts that candidate more than this
// much faster: the fitted rules come within a few percent of the optimum on
// most recorded problems, and the model's ties are not that precise
// (leave-one-out on the H100 recordings: median 1.017 -> 1.014;
// bench/RESULTS.md).
inline constexpr double kFittedMargin = 0.05;

// Where a template ranks above the best-ranked candidate's for the asked
// problem (KernelTemplate::default_rank), its fitted config is served first
// unless the model predicts that candidate more than this much faster. The
// ranks compare templates as measured: on the H100 recordings the decode
// template was the fastest on all 28 problems where it ranks first, while
// the model, left without a problem, twice ranked a prefill template first
// there, predicting it 1.4 and 1.8 times faster than it ran.
inline constexpr double kOutrankedMargin = 0.5;

// How many of each tuned problem's fastest configs (per template) the pool
// transfers are chosen from holds: the daemon's and the leave-one-out
// measurement's alike.
inline constexpr size_t kTransferPoolPerProblem = 50;

// The `per_problem` fastest samples of each (template, problem), the pool
// transfers are chosen from, each with the samples of its config at the
// other split counts (KV_SPLITS) that ran at its head_dim and dtype (at any,
// for a template that fits every form): of each config, only its first
// sample per head_dim and dtype (per template, for one that fits every
// form; in (template, problem) order), which is all RankTransfers reads.
std::vector<TransferCandidate> TransferPool(
    const std::vector<CostSample>& samples, size_t per_problem);

// The pool's distinct configs that run on `problem` (CheckSupports and
// CheckConfig on the model's device), fastest predicted first, at most k.
// Configs measured at the problem's head_dim and dtype come alone when
// there are any, else those of its head_dim: register use, which no check
// foresees, changes with them. Configs of a template that fits every form
// (KernelTemplate::fits_every_form) come wherever they were measured. The
// first config the first one's template fits to the problem that runs there
// comes first (`fitted`) when predicted within kFittedMargin of it, or
// when the first one's grid leaves more than half the multiprocessors idle
// where the fitted config's has at least twice the blocks; where another
// template of the pool (runnable or not) ranks above that one for the
// problem, the first config that template fits comes first instead, when
// predicted within kOutrankedMargin.
absl::StatusOr<std::vector<RankedTransfer>> RankTransfers(
    const CostModel& model, const std::vector<TransferCandidate>& pool,
    const Problem& problem, size_t k);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_MODEL_TRANSFER_H_
