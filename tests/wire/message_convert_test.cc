#include "tuner/wire/message_convert.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TrialTask Task() {
  TrialTask t;
  t.device.name = "Test GPU";
  t.template_name = "naive";
  t.template_hash = "h1";
  t.config = {{"KV_TILE", 64}, {"WARPS", 4}};
  t.problem.heads = t.problem.kv_heads = 8;
  t.problem.seq_q = t.problem.seq_k = 512;
  return t;
}

TEST(MessageConvertTest, ATaskWithRivalsCrossesTheWire) {
  TrialTask task = Task();
  task.rivals = {{"naive", "h1", {{"KV_TILE", 32}, {"WARPS", 4}}},
                 {"flash_fwd", "h2", {{"BLOCK_M", 64}, {"WARPS", 8}}}};
  task.turns = 30;
  absl::StatusOr<TrialTask> back =
      TaskFromProto(TaskToProto("t1", task, absl::Seconds(5)));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->config, task.config);
  EXPECT_EQ(back->rivals, task.rivals);
  EXPECT_EQ(back->turns, 30);
  // Without rivals, as before.
  back = TaskFromProto(TaskToProto("t2", Task(), absl::Seconds(5)));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->rivals.empty());
}

v1::Rival RivalProto(const Config& config) {
  v1::Rival r;
  r.set_template_name("naive");
  r.set_template_hash("h1");
  *r.mutable_config() = ConfigToProto(config);
  return r;
}

TEST(MessageConvertTest, BadRivalsAreRefusedByField) {
  v1::TrialTask proto = TaskToProto("t1", Task(), absl::Seconds(5));
  *proto.add_rivals() = RivalProto({{"WARPS", 2}});
  proto.set_turns(0);
  absl::StatusOr<TrialTask> t = TaskFromProto(proto);
  EXPECT_TRUE(absl::IsInvalidArgument(t.status()));
  EXPECT_THAT(std::string(t.status().message()), StartsWith("task.turns:"));
  proto.set_turns(kMaxTurns + 1);
  EXPECT_THAT(std::string(TaskFromProto(proto).status().message()),
              StartsWith("task.turns:"));
  proto.set_turns(10);
  ASSERT_TRUE(TaskFromProto(proto).ok());
  // A rival must name its template version.
  proto.mutable_rivals(0)->clear_template_hash();
  EXPECT_THAT(std::string(TaskFromProto(proto).status().message()),
              StartsWith("task.rivals[0].template_name:"));
  proto.mutable_rivals(0)->set_template_hash("h1");
  v1::ParamValue* twice =
      proto.mutable_rivals(0)->mutable_config()->add_params();
  twice->set_name("WARPS");
  twice->set_value(4);
  EXPECT_THAT(std::string(TaskFromProto(proto).status().message()),
              HasSubstr("WARPS"));
  proto.clear_rivals();
  for (int i = 0; i <= kMaxRivals; ++i) {
    *proto.add_rivals() = RivalProto({{"WARPS", i}});
  }
  EXPECT_THAT(std::string(TaskFromProto(proto).status().message()),
              StartsWith("task.rivals:"));
}

TEST(MessageConvertTest, RivalsResultsComeBackInOrder) {
  v1::CompleteTrialRequest req;
  req.set_status(v1::TRIAL_STATUS_OK);
  req.mutable_latency()->set_median_us(10);
  req.mutable_latency()->set_samples(30);
  req.mutable_latency()->set_timed_against(1);
  TrialResult rival;
  rival.median_us = 12;
  rival.samples = 30;
  rival.timed_against = 1;
  *req.add_rivals() = RivalToProto(rival);
  TrialResult wrong;
  wrong.status = TrialStatus::kIncorrect;
  wrong.error = "max abs error 0.5";
  *req.add_rivals() = RivalToProto(wrong);
  absl::StatusOr<TrialResult> r = ResultFromProto(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->median_us, 10);
  EXPECT_EQ(r->timed_against, 1);
  ASSERT_EQ(r->rival_results.size(), 2u);
  EXPECT_EQ(r->rival_results[0].median_us, 12);
  EXPECT_EQ(r->rival_results[0].timed_against, 1);
  EXPECT_EQ(r->rival_results[1].status, TrialStatus::kIncorrect);
  EXPECT_EQ(r->rival_results[1].error, "max abs error 0.5");
  // A rival said to be ok without a latency is refused, naming it.
  req.mutable_rivals(1)->set_status(v1::TRIAL_STATUS_OK);
  EXPECT_THAT(std::string(ResultFromProto(req).status().message()),
              StartsWith("rivals[1].latency.median_us:"));
  req.mutable_rivals(1)->set_status(static_cast<v1::TrialStatus>(42));
  EXPECT_THAT(std::string(ResultFromProto(req).status().message()),
              StartsWith("rivals[1].status:"));
}

}  // namespace
}  // namespace evotune
