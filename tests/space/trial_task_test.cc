#include "tuner/space/trial_task.h"

#include "gtest/gtest.h"

namespace evotune {
namespace {

TEST(TrialTaskWorkTest, OneConfigIsOneTrial) {
  TrialTask task;
  task.config = {{"BLOCK_M", 64}};
  EXPECT_EQ(TrialTaskWork(task), 1);
  task.quick = true;
  EXPECT_EQ(TrialTaskWork(task), 1);
}

TEST(TrialTaskWorkTest, RivalsAndTurnsPastAFullTimingAddWork) {
  TrialTask task;
  task.config = {{"BLOCK_M", 64}};
  task.rivals = {{{"BLOCK_M", 128}}, {{"BLOCK_M", 32}}};
  task.turns = kFullTimingSamples;
  EXPECT_EQ(TrialTaskWork(task), 3);
  task.turns = 2 * kFullTimingSamples;
  EXPECT_EQ(TrialTaskWork(task), 6);
  task.turns = 1;  // Fewer samples than a full timing still gate each config.
  EXPECT_EQ(TrialTaskWork(task), 3);
}

TEST(TaskConfigsTest, TheConfigThenItsRivals) {
  TrialTask task;
  task.config = {{"BLOCK_M", 64}};
  EXPECT_EQ(TaskConfigs(task), std::vector<Config>{task.config});
  task.rivals = {{{"BLOCK_M", 128}}, {{"BLOCK_M", 32}}};
  EXPECT_EQ(TaskConfigs(task),
            (std::vector<Config>{task.config, task.rivals[0], task.rivals[1]}));
}

}  // namespace
}  // namespace evotune
