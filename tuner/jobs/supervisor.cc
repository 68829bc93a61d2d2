#include "tuner/jobs/supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "tuner/common/log.h"
#include "tuner/wire/worker_exit.h"

extern char** environ;

namespace evotune {
namespace {

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("exited with status ", WEXITSTATUS(status));
}

// argv and envp for execve, built before fork (the child may only make
// async-signal-safe calls).
struct ExecArgs {
  std::vector<std::string> storage;
  std::vector<char*> argv;
  std::vector<char*> envp;

  ExecArgs(const std::vector<std::string>& args,
           const std::vector<std::string>& env) {
    storage = args;
    storage.insert(storage.end(), env.begin(), env.end());
    for (size_t i = 0; i < args.size(); ++i) argv.push_back(storage[i].data());
    argv.push_back(nullptr);
    for (size_t i = args.size(); i < storage.size(); ++i) {
      envp.push_back(storage[i].data());
    }
    envp.push_back(nullptr);
  }
};

// The daemon's environment with `overrides` ("NAME=value") replacing or
// adding variables.
std::vector<std::string> Environment(
    const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& o : overrides) {
      replaced |= o.substr(0, o.find('=')) == name;
    }
    if (!replaced) env.push_back(entry);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

// In the child after fork: die with the daemon, default signal mask, exec.
[[noreturn]] void ExecChild(const ExecArgs& exec, int stdout_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (stdout_fd >= 0) dup2(stdout_fd, STDOUT_FILENO);
  execve(exec.argv[0], exec.argv.data(), exec.envp.data());
  _exit(127);
}

// Runs the worker binary with --probe: the number of devices, or why none.
absl::StatusOr<int> ProbeDevices(const std::string& binary,
                                 const std::vector<std::string>& flags) {
  std::vector<std::string> args = {binary, "--probe"};
  args.insert(args.end(), flags.begin(), flags.end());
  const ExecArgs exec(args, Environment({}));
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    ExecChild(exec, fds[1]);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string line(absl::StripAsciiWhitespace(out));
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExitNoDevice) {
    return absl::FailedPreconditionError(line);
  }
  int count = 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      !absl::SimpleAtoi(line, &count)) {
    return absl::InternalError(absl::StrCat("cannot run the worker ", binary,
                                            " (", DescribeExit(status), ")"));
  }
  return count;
}

}  // namespace

Supervisor::Supervisor(Options options, WorkerPool* pool)
    : options_(std::move(options)), pool_(pool) {}

Supervisor::~Supervisor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

int Supervisor::workers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(slots_.size());
}

absl::Status Supervisor::Start() {
  int count = options_.workers;
  if (count < 0) {
    absl::StatusOr<int> found =
        ProbeDevices(options_.worker_binary, options_.worker_flags);
    if (absl::IsFailedPrecondition(found.status())) {
      pool_->SetNoWorkerReason(std::string(found.status().message()));
      LogError(
          absl::StrCat(found.status().message(), "; no local workers started"));
      return absl::OkStatus();
    }
    if (!found.ok()) return found.status();
    count = *found;
  }
  if (count == 0) return absl::OkStatus();  // Remote workers only.
  std::vector<std::string> devices = options_.visible_devices;
  if (devices.empty()) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (visible != nullptr && *visible != '\0') {
      devices = absl::StrSplit(visible, ',');
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (int i = 0; i < count; ++i) {
      Slot slot;
      slot.visible_device =
          i < static_cast<int>(devices.size()) ? devices[i] : absl::StrCat(i);
      slot.backoff = options_.min_backoff;
      slot.restart_at = absl::InfinitePast();
      slots_.push_back(slot);
    }
  }
  pool_->SetKiller([this](const std::string& name) { Kill(name); });
  pool_->AddOnRegister([this](const WorkerInfo& w) { OnRegister(w.name); });
  // Workers are forked from this thread, which lives as long as they may:
  // their parent-death signal fires when the forking thread ends.
  thread_ = std::thread([this] { Loop(); });
  LogInfo(
      absl::StrCat("starting ", count, " local worker", count == 1 ? "" : "s"));
  return absl::OkStatus();
}

void Supervisor::Kill(const std::string& name) {
  absl::MutexLock lock(&mu_);
  for (const Slot& s : slots_) {
    if (s.pid > 0 && s.name == name) {
      LogInfo(absl::StrCat("killing worker ", name));
      kill(s.pid, SIGKILL);
    }
  }
}

void Supervisor::OnRegister(const std::string& name) {
  absl::MutexLock lock(&mu_);
  for (Slot& s : slots_) {
    if (s.name != name) continue;
    // It got as far as serving: its next death restarts it quickly.
    s.backoff = options_.min_backoff;
    if (s.down_since == absl::InfinitePast()) continue;
    LogInfo(absl::StrCat(
        "worker ", name, " ready again ",
        absl::FormatDuration(absl::Trunc(options_.clock->Now() - s.down_since,
                                         absl::Milliseconds(1))),
        " after its predecessor went down"));
    s.down_since = absl::InfinitePast();
  }
}

void Supervisor::Spawn(int index) {
  Slot& s = slots_[index];
  s.name = absl::StrCat("local-", index, "#", ++s.starts);
  std::vector<std::string> args = {options_.worker_binary,
                                   absl::StrCat("--name=", s.name)};
  args.insert(args.end(), options_.worker_flags.begin(),
              options_.worker_flags.end());
  std::vector<std::string> overrides;
  if (!s.visible_device.empty()) {
    overrides.push_back(
        absl::StrCat("CUDA_VISIBLE_DEVICES=", s.visible_device));
  }
  if (!options_.token.empty()) {
    overrides.push_back(absl::StrCat("EVOTUNE_TOKEN=", options_.token));
  }
  const ExecArgs exec(args, Environment(overrides));
  const pid_t pid = fork();
  if (pid == 0) ExecChild(exec, -1);
  if (pid < 0) {
    LogError(absl::StrCat("cannot start worker ", s.name, ": ",
                          std::strerror(errno)));
    s.restart_at = options_.clock->Now() + options_.max_backoff;
    return;
  }
  s.pid = pid;
}

void Supervisor::Reap() {
  int status = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (Slot& s : slots_) {
      if (s.pid != pid) continue;
      s.pid = 0;
      const absl::Time now = options_.clock->Now();
      s.down_since = now;
      const std::string how = DescribeExit(status);
      // The pool takes the worker's trial back (or counts it as a crash).
      mu_.Unlock();
      pool_->WorkerExited(s.name, how);
      mu_.Lock();
      if (WIFEXITED(status) && (WEXITSTATUS(status) == kExitNoDevice ||
                                WEXITSTATUS(status) == kExitUnauthenticated)) {
        LogError(absl::StrCat("worker ", s.name, " ", how,
                              WEXITSTATUS(status) == kExitNoDevice
                                  ? " (no device)"
                                  : " (its token was refused)",
                              "; not restarting it"));
        s.gave_up = true;
        break;
      }
      const absl::Duration delay = s.backoff;
      s.restart_at = now + delay;
      s.backoff = std::min(2 * s.backoff, options_.max_backoff);
      LogInfo(absl::StrCat("worker ", s.name, " ", how, "; restarting in ",
                           absl::FormatDuration(delay)));
      break;
    }
  }
}

void Supervisor::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    Reap();
    const absl::Time now = options_.clock->Now();
    for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
      Slot& s = slots_[i];
      if (s.pid == 0 && !s.gave_up && now >= s.restart_at) Spawn(i);
    }
    auto stop = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    mu_.AwaitWithTimeout(absl::Condition(&stop), absl::Milliseconds(20));
  }
  for (const Slot& s : slots_) {
    if (s.pid > 0) kill(s.pid, SIGTERM);
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(2);
  while (absl::Now() < give_up) {
    bool any = false;
    for (Slot& s : slots_) {
      if (s.pid > 0 && waitpid(s.pid, nullptr, WNOHANG) == s.pid) s.pid = 0;
      any |= s.pid > 0;
    }
    if (!any) return;
    mu_.Unlock();
    absl::SleepFor(absl::Milliseconds(20));
    mu_.Lock();
  }
  for (Slot& s : slots_) {
    if (s.pid > 0) {
      kill(s.pid, SIGKILL);
      waitpid(s.pid, nullptr, 0);
    }
  }
}

}  // namespace evotune
