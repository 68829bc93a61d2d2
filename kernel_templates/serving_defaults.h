// What a problem nothing tuned serves gets: the defaults of the template
// that suits it best (KernelTemplate::default_rank), configs fitted to the
// problem and device first. One rule for the daemon's answers and for the
// measurements of them (tuner/model/leave_one_out).
#ifndef EVOTUNE_KERNEL_TEMPLATES_SERVING_DEFAULTS_H_
#define EVOTUNE_KERNEL_TEMPLATES_SERVING_DEFAULTS_H_

#include <cstddef>
#include <vector>

#include "kernel_templates/kernel_template.h"

namespace evotune {

// t.default_rank for the problem; 0 when unset.
int DefaultRank(const KernelTemplate& t, const Problem& problem);

// The templates of `candidates` that can serve the problem on the device
// (they support its head_dim and dtype, and the device) and rank highest
// for it; empty when none can.
std::vector<const KernelTemplate*> TopRanked(
    const std::vector<const KernelTemplate*>& candidates,
    const Problem& problem, const DeviceLimits& limits);

// The template's configs known or fitted to do well on the problem:
// fitted_defaults, then defaults (some may not run on it). Search seeds and
// answers made of defaults start from them. `fitted`, when given, is set to
// how many lead the list as fitted to the problem (search trusts those).
std::vector<Config> DefaultConfigs(const KernelTemplate& t,
                                   const Problem& problem,
                                   const DeviceLimits& limits,
                                   size_t* fitted = nullptr);

// A template's config, as an answer made of defaults holds it.
struct DefaultChoice {
  const KernelTemplate* t = nullptr;
  Config config;
};

// Up to k defaults for the problem: templates by DefaultRank (higher first,
// ties in the order given), each's DefaultConfigs, only
// those that run on the problem there (RunsOn), none twice.
std::vector<DefaultChoice> RankedDefaults(
    const std::vector<const KernelTemplate*>& candidates,
    const Problem& problem, const DeviceLimits& limits, size_t k);

}  // namespace evotune

#endif  // EVOTUNE_KERNEL_TEMPLATES_SERVING_DEFAULTS_H_
