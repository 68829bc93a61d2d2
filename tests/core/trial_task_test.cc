#include "core/trial_task.h"

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
  task.rivals = {{"t", "h", {{"BLOCK_M", 128}}},
                 {"other", "h2", {{"BLOCK_M", 32}}}};
  task.turns = kFullTimingSamples;
  EXPECT_EQ(TrialTaskWork(task), 3);
  task.turns = 2 * kFullTimingSamples;
  EXPECT_EQ(TrialTaskWork(task), 6);
  task.turns = 1;  // Fewer samples than a full timing still gate each config.
  EXPECT_EQ(TrialTaskWork(task), 3);
}

TEST(TaskContendersTest, TheConfigOfTheTasksTemplateThenItsRivals) {
  TrialTask task;
  task.template_name = "t";
  task.template_hash = "h";
  task.config = {{"BLOCK_M", 64}};
  const Contender own{"t", "h", task.config};
  EXPECT_EQ(TaskContenders(task), std::vector<Contender>{own});
  task.rivals = {{"t", "h", {{"BLOCK_M", 128}}},
                 {"other", "h2", {{"TILE_N", 32}}}};
  EXPECT_EQ(TaskContenders(task),
            (std::vector<Contender>{own, task.rivals[0], task.rivals[1]}));
}

}  // namespace
}  // namespace evotune
