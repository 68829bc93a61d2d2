// The supervisor with stand-in workers (shell scripts that log how they were
// started) and restart times on a fake clock: a worker that dies is started
// again after a backoff that doubles until it registers, one without a device
// is left down, Kill ends the named worker, and workers end with the
// supervisor.
#include "tuner/jobs/supervisor.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tuner/wire/worker_exit.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat(
               "supervisor_", getpid(), "_",
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    log_ = (dir_ / "starts").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A worker that appends "ARGS | CUDA_VISIBLE_DEVICES | EVOTUNE_TOKEN | PID"
  // to the log, then runs `then` (e.g. "exit 1", "exec sleep 30").
  std::string Worker(const std::string& then) {
    const std::string path = (dir_ / "worker.sh").string();
    std::ofstream(path) << "#!/bin/sh\necho \"$* | $CUDA_VISIBLE_DEVICES | "
                           "$EVOTUNE_TOKEN | $$\" >> "
                        << log_ << "\n"
                        << then << "\n";
    chmod(path.c_str(), 0755);
    return path;
  }

  std::vector<std::string> Starts() const {
    std::vector<std::string> lines;
    std::ifstream in(log_);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  // Waits (in real time, up to 5 s) until the log has `n` starts.
  bool WaitForStarts(size_t n) const {
    const absl::Time until = absl::Now() + absl::Seconds(5);
    while (Starts().size() < n && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    return Starts().size() == n;
  }

  // The supervisor's loop runs every 20 ms: a few of its turns.
  static void LetItTurn() { absl::SleepFor(absl::Milliseconds(200)); }

  Supervisor::Options Options(const std::string& then) {
    Supervisor::Options o;
    o.worker_binary = Worker(then);
    o.worker_flags = {"--daemon=127.0.0.1:1"};
    o.token = "s3cret";
    o.workers = 1;
    o.visible_devices = {"7"};
    o.min_backoff = absl::Seconds(1);
    o.max_backoff = absl::Seconds(8);
    o.clock = &clock_;
    return o;
  }

  std::filesystem::path dir_;
  std::string log_;
  FakeClock clock_;
  WorkerPool pool_{WorkerPool::Options{}};
};

TEST_F(SupervisorTest,
       AWorkerIsStartedWithItsDeviceAndTheTokenInItsEnvironment) {
  Supervisor supervisor(Options("exec sleep 30"), &pool_);
  ASSERT_TRUE(supervisor.Start().ok());
  EXPECT_EQ(supervisor.workers(), 1);
  ASSERT_TRUE(WaitForStarts(1));
  const std::string start = Starts()[0];
  EXPECT_THAT(start, HasSubstr("--name=local-0#1 --daemon=127.0.0.1:1 | 7 | "
                               "s3cret | "));
  EXPECT_THAT(start.substr(0, start.find('|')), Not(HasSubstr("s3cret")));
}

TEST_F(SupervisorTest, ADeadWorkerComesBackAfterABackoffThatDoubles) {
  Supervisor supervisor(Options("exit 1"), &pool_);
  ASSERT_TRUE(supervisor.Start().ok());
  ASSERT_TRUE(WaitForStarts(1));
  LetItTurn();
  EXPECT_EQ(Starts().size(), 1u);  // 1 s of fake time has not passed.
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(WaitForStarts(2));
  EXPECT_THAT(Starts()[1], HasSubstr("--name=local-0#2 "));
  LetItTurn();  // Its death is seen at this time.
  clock_.Advance(absl::Seconds(1));
  LetItTurn();
  EXPECT_EQ(Starts().size(), 2u);  // Now 2 s.
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(WaitForStarts(3));
  for (int i = 0; i < 4; ++i) {  // 4 s, then capped at 8 s.
    LetItTurn();
    clock_.Advance(absl::Seconds(8));
    ASSERT_TRUE(WaitForStarts(4 + i)) << i;
  }
}

TEST_F(SupervisorTest, AWorkerWithoutADeviceIsNotStartedAgain) {
  Supervisor supervisor(Options(absl::StrCat("exit ", kExitNoDevice)), &pool_);
  ASSERT_TRUE(supervisor.Start().ok());
  ASSERT_TRUE(WaitForStarts(1));
  clock_.Advance(absl::Minutes(10));
  LetItTurn();
  EXPECT_EQ(Starts().size(), 1u);
}

TEST_F(SupervisorTest, KillEndsTheNamedWorkerWhichThenComesBack) {
  Supervisor supervisor(Options("exec sleep 30"), &pool_);
  ASSERT_TRUE(supervisor.Start().ok());
  ASSERT_TRUE(WaitForStarts(1));
  supervisor.Kill("local-0#9");  // No such worker: nothing happens.
  LetItTurn();
  clock_.Advance(absl::Seconds(1));
  LetItTurn();
  EXPECT_EQ(Starts().size(), 1u);
  supervisor.Kill("local-0#1");
  LetItTurn();
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(WaitForStarts(2));
}

TEST_F(SupervisorTest, WorkersEndWithTheSupervisor) {
  pid_t pid = 0;
  {
    Supervisor supervisor(Options("exec sleep 30"), &pool_);
    ASSERT_TRUE(supervisor.Start().ok());
    ASSERT_TRUE(WaitForStarts(1));
    const std::string start = Starts()[0];
    ASSERT_TRUE(absl::SimpleAtoi(start.substr(start.rfind('|') + 2), &pid));
    EXPECT_EQ(kill(pid, 0), 0);
  }
  EXPECT_EQ(kill(pid, 0), -1);  // Ended and reaped.
  EXPECT_EQ(errno, ESRCH);
}

}  // namespace
}  // namespace evotune
