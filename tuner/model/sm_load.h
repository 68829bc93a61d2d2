// SmLoad: how evenly a launch's work falls on the multiprocessors, a figure a
// cost model cannot learn from sizes alone. A causal mask makes one head's
// query blocks differ in length up to q_blocks times, and whether the longest
// ones share a multiprocessor decides a kernel's time as much as its tiles
// do (flash_fwd_tma, b2 h16 1024² causal: 25 µs with two blocks per
// multiprocessor, 16.6 µs persistent).
//
// The model of the work: a block computes `tile_rows` query rows of one head
// against the keys its causal mask and KV split leave it, plus a fixed
// prologue and epilogue; the last query block of a head runs first (the
// prefill templates' order). A grid's blocks go to the multiprocessors in
// turn; a persistent kernel's blocks walk the tiles in a snake over waves
// (flash_fwd_tma's Tiles).
#ifndef EVOTUNE_TUNER_MODEL_SM_LOAD_H_
#define EVOTUNE_TUNER_MODEL_SM_LOAD_H_

#include <optional>

#include "kernel_templates/kernel_template.h"

namespace evotune {

struct SmLoad {
  double busiest = 0;  // Work of the busiest multiprocessor (rows x keys).
  double mean = 0;     // Work of the average multiprocessor.
};

// The query rows of one head that `g`'s tiles cover: seq_q, or with packed
// heads the rows of the query heads sharing a KV head.
int64_t TileHeadRows(const LaunchGeometry& g, const Problem& p);

// nullopt when the geometry does not say its tile rows or the device's
// multiprocessor count is unknown (0).
std::optional<SmLoad> EstimateSmLoad(const LaunchGeometry& g, const Problem& p,
                                     int multiprocessors);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_MODEL_SM_LOAD_H_
