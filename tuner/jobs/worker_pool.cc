#include "tuner/jobs/worker_pool.h"

#include <algorithm>
#include <cstdlib>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "tuner/common/log.h"

namespace evotune {
namespace {

// Trial durations remembered per device for deadlines.
constexpr size_t kRecentDurations = 16;
// Queued trials sent along with a lease, to compile ahead.
constexpr int kUpcoming = WorkerPool::kMaxCompileAhead;

std::string DurationKey(const TrialTask& t) {
  const DeviceInfo& d = t.device;
  return absl::StrCat(d.name, "|", d.cc_major, ".", d.cc_minor, "|",
                      d.driver_version, "|", d.nvrtc_version);
}

std::string NewInstanceId() {
  absl::BitGen gen;
  return absl::StrFormat("%08x", absl::Uniform<uint32_t>(gen));
}

}  // namespace

WorkerPool::WorkerPool(Options options)
    : options_(options), instance_(NewInstanceId()), created_(absl::Now()) {
  reaper_ = std::thread([this] { Reap(); });
}

WorkerPool::~WorkerPool() { Close(); }

void WorkerPool::Close() {
  Finished finished;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [id, task] : tasks_) {
      finished.push_back(
          {std::move(task.done), absl::UnavailableError("shutting down")});
    }
    tasks_.clear();
    queue_.clear();
  }
  reaper_.join();
  for (auto& [done, result] : finished) done(std::move(result));
  // Lease calls still waiting see stopping_ and return.
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [id, w] : workers_) {
      if (w.leasing > 0) return false;
    }
    return true;
  };
  mu_.Await(absl::Condition(&idle));
}

bool WorkerPool::Matches(const Worker& w, const TrialTask& t) const {
  if (w.aborted || !w.info.device.SameKey(t.device)) return false;
  // It must compile every config of the task, rivals of other templates too.
  for (const Contender& c : TaskContenders(t)) {
    if (std::find(w.info.templates.begin(), w.info.templates.end(),
                  std::pair{c.template_name, c.template_hash}) ==
        w.info.templates.end()) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<DeviceInfo> WorkerPool::FindDevice(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto found = [&]() -> const Worker* {
    for (const std::string& id : worker_order_) {
      const Worker& w = workers_.at(id);
      if (!w.aborted && (name.empty() || w.info.device.name == name)) return &w;
    }
    return nullptr;
  };
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return found() != nullptr || !no_worker_reason_.empty() || stopping_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready),
                        created_ + options_.startup_wait);
  if (const Worker* w = found()) return w->info.device;
  if (!workers_.empty()) {
    std::vector<std::string> names;
    for (const std::string& id : worker_order_) {
      names.push_back(
          absl::StrCat("\"", workers_.at(id).info.device.name, "\""));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("device: no worker serves \"", name,
                     "\" (connected: ", absl::StrJoin(names, ", "), ")"));
  }
  return absl::FailedPreconditionError(
      no_worker_reason_.empty()
          ? "no CUDA device: no GPU worker is connected (start evotune-worker "
            "--daemon=ADDRESS on a machine with a GPU)"
          : no_worker_reason_);
}

absl::Status WorkerPool::CanEvaluate(const DeviceInfo& device,
                                     const KernelTemplate& t) const {
  absl::MutexLock lock(&mu_);
  const TrialTask probe{device, t.name, t.hash, {}, {}, false};
  for (const auto& [id, w] : workers_) {
    if (Matches(w, probe)) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("template_name: no worker on ",
                                                 device.name, " has ", t.name,
                                                 " version ", t.hash));
}

bool WorkerPool::CanRun(const TrialTask& task) const {
  absl::MutexLock lock(&mu_);
  return std::any_of(workers_.begin(), workers_.end(),
                     [&](const auto& w) { return Matches(w.second, task); });
}

int WorkerPool::Parallelism(const DeviceInfo& device) const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, w] : workers_) {
    n += !w.aborted && w.info.device.SameKey(device);
  }
  return std::max(1, n);
}

int WorkerPool::QueuedAhead(const DeviceInfo& device) const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, w] : workers_) {
    if (w.aborted || !w.info.device.SameKey(device)) continue;
    n += w.info.compile_ahead > 0 ? w.info.compile_ahead : kQueuedAhead;
  }
  return std::max(kQueuedAhead, n);
}

int WorkerPool::workers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(workers_.size());
}

uint64_t WorkerPool::Start(TrialTask task, TrialDone done) {
  uint64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = next_task_++;
    if (!stopping_) {
      Task& t = tasks_[id];
      t.task = std::move(task);
      t.done = std::move(done);
      queue_.push_back(id);
      return id;
    }
  }
  done(absl::UnavailableError("shutting down"));
  return id;
}

void WorkerPool::Withdraw(uint64_t id) {
  Finished finished;
  {
    absl::MutexLock lock(&mu_);
    auto it = tasks_.find(id);
    if (it == tasks_.end() || !it->second.worker_id.empty()) return;
    Finish(id, absl::CancelledError("withdrawn"), &finished);
  }
  for (auto& [done, result] : finished) done(std::move(result));
}

absl::StatusOr<std::string> WorkerPool::Register(WorkerInfo info) {
  Finished finished;
  std::string id;
  const std::string name = info.name;
  const WorkerInfo registered = info;
  std::vector<std::function<void(const WorkerInfo&)>> on_register;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [other_id, w] : workers_) {
      if (w.info.name == name) {
        DropWorker(other_id, "registered again", &finished);
        break;
      }
    }
    id = absl::StrCat(instance_, "-w", next_worker_++);
    const DeviceLimits& limits = info.device.limits;
    LogInfo(absl::StrCat("worker ", name, " registered (", info.device.name,
                         ": ", limits.multiprocessors, " multiprocessors, ",
                         limits.smem_per_block_bytes / 1024,
                         " KiB shared memory per block)"));
    workers_[id] = Worker{std::move(info), options_.clock->Now()};
    worker_order_.push_back(id);
    on_register = on_register_;
  }
  for (auto& [done, result] : finished) done(std::move(result));
  for (const auto& call : on_register) call(registered);
  return id;
}

LeasedTask WorkerPool::ToLeased(uint64_t id, const Task& t) const {
  return LeasedTask{absl::StrCat(instance_, "-t", id), t.task, t.deadline};
}

absl::Duration WorkerPool::DeadlineFor(const TrialTask& t) const {
  absl::Duration expected = options_.first_trial_estimate;
  auto it = durations_.find(DurationKey(t));
  if (it != durations_.end() && !it->second.empty()) {
    expected = *std::max_element(it->second.begin(), it->second.end());
  }
  return options_.deadline_factor * TrialTaskWork(t) * expected +
         options_.deadline_slack;
}

void WorkerPool::RecordDuration(const TrialTask& t, absl::Duration d) {
  std::deque<absl::Duration>& recent = durations_[DurationKey(t)];
  recent.push_back(d / TrialTaskWork(t));
  if (recent.size() > kRecentDurations) recent.pop_front();
}

absl::StatusOr<std::optional<LeasedTask>> WorkerPool::Lease(
    const std::string& worker_id, absl::Duration wait,
    std::vector<LeasedTask>* upcoming) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker_id: unknown worker ", worker_id));
  }
  if (it->second.aborted) {
    return absl::FailedPreconditionError(
        "worker_id: this worker's trial passed its deadline; it must exit");
  }
  ++it->second.leasing;
  auto pick = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return Pick(worker_id);
  };
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || workers_.count(worker_id) == 0 ||
           pick() != queue_.end();
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), wait);
  it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker_id: worker ", worker_id, " was dropped"));
  }
  Worker& w = it->second;
  --w.leasing;
  w.last_seen = options_.clock->Now();
  auto next = pick();
  if (stopping_ || next == queue_.end()) return std::nullopt;
  const uint64_t id = *next;
  queue_.erase(next);
  Task& task = tasks_.at(id);
  task.worker_id = worker_id;
  task.leased_at = options_.clock->Now();
  task.deadline = DeadlineFor(task.task);
  w.task = id;
  if (upcoming != nullptr) {
    for (uint64_t q : queue_) {
      if (static_cast<int>(upcoming->size()) >= kUpcoming) break;
      Task& t = tasks_.at(q);
      if (!Matches(w, t.task) || !ClaimableBy(t, worker_id)) continue;
      t.prefetched_by = worker_id;
      upcoming->push_back(ToLeased(q, t));
    }
  }
  return ToLeased(id, task);
}

bool WorkerPool::ClaimableBy(const Task& t,
                             const std::string& worker_id) const {
  return t.prefetched_by.empty() || t.prefetched_by == worker_id ||
         workers_.count(t.prefetched_by) == 0;
}

std::deque<uint64_t>::iterator WorkerPool::Pick(const std::string& worker_id) {
  auto w = workers_.find(worker_id);
  if (w == workers_.end()) return queue_.end();
  auto first_own = queue_.end(), first_free = queue_.end(),
       first_any = queue_.end();
  for (auto q = queue_.begin(); q != queue_.end(); ++q) {
    const Task& t = tasks_.at(*q);
    if (!Matches(w->second, t.task)) continue;
    if (first_any == queue_.end()) first_any = q;
    if (t.prefetched_by == worker_id) {
      first_own = q;
      break;
    }
    if (first_free == queue_.end() && ClaimableBy(t, worker_id)) first_free = q;
  }
  if (first_own != queue_.end()) return first_own;
  return first_free != queue_.end() ? first_free : first_any;
}

absl::StatusOr<bool> WorkerPool::Heartbeat(const std::string& worker_id,
                                           const std::string& task_id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker_id: unknown worker ", worker_id));
  }
  it->second.last_seen = options_.clock->Now();
  return it->second.aborted;
}

std::optional<uint64_t> WorkerPool::ParseTaskId(
    const std::string& task_id) const {
  absl::string_view rest = task_id;
  uint64_t id = 0;
  if (!absl::ConsumePrefix(&rest, instance_) ||
      !absl::ConsumePrefix(&rest, "-t") || !absl::SimpleAtoi(rest, &id)) {
    return std::nullopt;
  }
  return id;
}

absl::Status WorkerPool::Complete(const std::string& worker_id,
                                  const LeasedTask& leased, TrialResult result,
                                  bool worker_lost) {
  Finished finished;
  std::function<void(const TrialTask&, const TrialResult&)> orphan;
  {
    absl::MutexLock lock(&mu_);
    auto w = workers_.find(worker_id);
    if (w != workers_.end()) w->second.last_seen = options_.clock->Now();
    const std::optional<uint64_t> id = ParseTaskId(leased.task_id);
    if (!id.has_value()) {
      // Leased from an earlier daemon: the result is still a result.
      if (!worker_lost) orphan = orphan_sink_;
    } else if (auto t = tasks_.find(*id); t != tasks_.end()) {
      const bool holder =
          w != workers_.end() && t->second.worker_id == worker_id;
      if (worker_lost) {
        if (holder) {
          w->second.task = 0;
          CountCrash(*id, result.error, &finished);
        }
      } else if (!result.rival_results.empty() &&
                 result.rival_results.size() != t->second.task.rivals.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rivals: ", result.rival_results.size(), " results for ",
            t->second.task.rivals.size(), " rivals"));
      } else {
        RecordDuration(t->second.task,
                       options_.clock->Now() - t->second.leased_at);
        if (holder) w->second.task = 0;
        Finish(*id, std::move(result), &finished);
      }
    }  // Else a late result of a finished trial: the first one stands.
    if (worker_lost && w != workers_.end()) {
      DropWorker(worker_id, "its CUDA context was lost", &finished);
    }
  }
  for (auto& [done, r] : finished) done(std::move(r));
  if (orphan) orphan(leased.task, result);
  return absl::OkStatus();
}

void WorkerPool::WorkerExited(const std::string& name,
                              const std::string& reason) {
  Finished finished;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, w] : workers_) {
      if (w.info.name == name) {
        DropWorker(id, reason, &finished);
        break;
      }
    }
  }
  for (auto& [done, result] : finished) done(std::move(result));
}

void WorkerPool::SetKiller(std::function<void(const std::string&)> killer) {
  absl::MutexLock lock(&mu_);
  killer_ = std::move(killer);
}

void WorkerPool::SetOrphanSink(
    std::function<void(const TrialTask&, const TrialResult&)> sink) {
  absl::MutexLock lock(&mu_);
  orphan_sink_ = std::move(sink);
}

void WorkerPool::AddOnRegister(
    std::function<void(const WorkerInfo&)> on_register) {
  absl::MutexLock lock(&mu_);
  on_register_.push_back(std::move(on_register));
}

void WorkerPool::SetNoWorkerReason(std::string reason) {
  absl::MutexLock lock(&mu_);
  no_worker_reason_ = std::move(reason);
}

void WorkerPool::DropWorker(std::string worker_id, const std::string& reason,
                            Finished* finished) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  LogInfo(absl::StrCat("worker ", it->second.info.name, " dropped: ", reason));
  const uint64_t task = it->second.task;
  workers_.erase(it);
  worker_order_.erase(
      std::remove(worker_order_.begin(), worker_order_.end(), worker_id),
      worker_order_.end());
  if (task != 0 && tasks_.count(task) != 0) {
    CountCrash(task, absl::StrCat("worker went down: ", reason), finished);
  }
}

void WorkerPool::CountCrash(uint64_t id, const std::string& reason,
                            Finished* finished) {
  Task& t = tasks_.at(id);
  ++t.crashes;
  if (t.crashes >= options_.crashes_to_record) {
    TrialResult crashed;
    crashed.status = TrialStatus::kCrashed;
    crashed.error =
        absl::StrCat("brought down ", t.crashes, " workers; last: ", reason);
    Finish(id, crashed, finished);
    return;
  }
  LogInfo(absl::StrCat("trial ", ConfigKey(t.task.config),
                       " requeued after a worker went down"));
  t.worker_id.clear();
  queue_.push_front(id);
}

void WorkerPool::Finish(uint64_t id, absl::StatusOr<TrialResult> result,
                        Finished* finished) {
  auto it = tasks_.find(id);
  finished->push_back({std::move(it->second.done), std::move(result)});
  tasks_.erase(it);
  queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
}

void WorkerPool::Reap() {
  const absl::Duration tick =
      std::min(absl::Milliseconds(100), options_.lease_timeout / 4);
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    auto stop = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    mu_.AwaitWithTimeout(absl::Condition(&stop), tick);
    if (stopping_) break;
    const absl::Time now = options_.clock->Now();
    Finished finished;
    std::vector<std::string> to_kill;
    std::vector<std::string> silent;
    for (auto& [id, w] : workers_) {
      if (w.leasing == 0 && now - w.last_seen > options_.lease_timeout) {
        silent.push_back(id);
      }
    }
    for (const std::string& id : silent) {
      DropWorker(id,
                 absl::StrCat("no heartbeat for ",
                              absl::FormatDuration(options_.lease_timeout)),
                 &finished);
    }
    std::vector<uint64_t> late;
    for (const auto& [id, t] : tasks_) {
      if (!t.worker_id.empty() && now - t.leased_at > t.deadline) {
        late.push_back(id);
      }
    }
    for (uint64_t id : late) {
      Task& t = tasks_.at(id);
      auto w = workers_.find(t.worker_id);
      if (w != workers_.end()) {
        w->second.aborted = true;
        w->second.task = 0;
        to_kill.push_back(w->second.info.name);
      }
      TrialResult timeout;
      timeout.status = TrialStatus::kTimeout;
      timeout.error = absl::StrCat(
          "no result within the deadline of ",
          absl::FormatDuration(absl::Trunc(t.deadline, absl::Milliseconds(1))),
          "; the worker was killed");
      LogInfo(absl::StrCat("trial timed out on worker ",
                           w != workers_.end() ? w->second.info.name : "?"));
      Finish(id, timeout, &finished);
    }
    if (finished.empty() && to_kill.empty()) continue;
    std::function<void(const std::string&)> killer = killer_;
    mu_.Unlock();
    // Kill first: a result that says "the worker was killed" is then true.
    if (killer) {
      for (const std::string& name : to_kill) killer(name);
    }
    for (auto& [done, result] : finished) done(std::move(result));
    mu_.Lock();
  }
}

}  // namespace evotune
