// CostModels: each device's cost model, trained on its trials in the store
// off the request path. A device gets a model once someone asks for it (Get)
// and it has enough OK trials; the model is trained again when its trials
// have grown by a share since. Readers get an immutable snapshot and never
// wait for a training. Thread-safe.
#ifndef EVOTUNE_TUNER_JOBS_COST_MODELS_H_
#define EVOTUNE_TUNER_JOBS_COST_MODELS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernel_templates/template_registry.h"
#include "storage/result_store.h"
#include "tuner/model/cost_model.h"
#include "tuner/model/transfer.h"

namespace evotune {

struct CostModelsOptions {
  // OK trials of the current template versions a device needs for a model.
  int64_t min_trials = 50;
  // Train again when the device's OK trials have grown by this share.
  double retrain_growth = 0.2;
  // How often the background thread looks for devices to (re)train.
  absl::Duration poll = absl::Seconds(5);
  CostModelOptions model;
};

// A trained model and the tuned configs it ranks for untuned problems.
struct ModelSnapshot {
  DeviceInfo device;
  std::unique_ptr<CostModel> model;
  std::vector<TransferCandidate> pool;  // TransferPool of its samples.
  int64_t version = 0;  // Distinct for every training of any device.
};

// What configs are checked against before they are served or learned
// from: the device's limits when they are known (this daemon's device, or
// one whose limits the store kept from its jobs), else its compute
// capability alone (a device the store has from before it kept limits:
// a template of another architecture's instructions is never served).
DeviceLimits ServingLimits(const DeviceInfo& device);

class CostModels {
 public:
  // `store` and `templates` must outlive this.
  CostModels(ResultStore* store, const TemplateRegistry* templates,
             CostModelsOptions options = {});
  ~CostModels();  // Stops the background thread.
  CostModels(const CostModels&) = delete;
  CostModels& operator=(const CostModels&) = delete;

  // Runs Refresh every options.poll on a background thread.
  void Start();

  // The device's newest model, or null while it has none; from now on the
  // device is trained for.
  std::shared_ptr<const ModelSnapshot> Get(const DeviceInfo& device);

  // Trains the model of every device asked for whose OK trials reached
  // min_trials or grew by retrain_growth since its last training. The
  // background thread calls it; so can tests.
  absl::Status Refresh();

 private:
  struct Entry {
    DeviceInfo device;
    std::shared_ptr<const ModelSnapshot> snapshot;
    int64_t trained_on = 0;   // OK samples of the last training.
    int64_t seen_trial = -1;  // LastTrialId when last looked at.
  };
  // Trains `device` if it is due; the new snapshot, or null.
  absl::StatusOr<std::shared_ptr<const ModelSnapshot>> Train(
      const DeviceInfo& device, int64_t trained_on);

  ResultStore* const store_;
  const TemplateRegistry* const templates_;
  const CostModelsOptions options_;
  const std::shared_ptr<const FeatureMap> features_;
  absl::Mutex mu_;
  std::map<std::string, Entry> devices_ ABSL_GUARDED_BY(mu_);
  int64_t versions_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace evotune

#endif  // EVOTUNE_TUNER_JOBS_COST_MODELS_H_
