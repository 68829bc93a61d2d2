#include "tuner/cli/report.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/html_testing.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::TrialEvent Event(int seq, int block, int warps, v1::TrialStatus status,
                     double us) {
  v1::TrialEvent e;
  e.set_sequence(seq);
  v1::Trial* t = e.mutable_trial();
  for (auto [name, value] : {std::pair{"BLOCK", block}, {"WARPS", warps}}) {
    v1::ParamValue* p = t->mutable_config()->add_params();
    p->set_name(name);
    p->set_value(value);
  }
  t->set_status(status);
  if (status == v1::TRIAL_STATUS_OK) {
    t->mutable_latency()->set_median_us(us);
    t->mutable_latency()->set_min_us(us * 0.99);
    t->mutable_latency()->set_p90_us(us * 1.02);
    t->mutable_latency()->set_samples(15);
  }
  return e;
}

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_.set_job_id("j<1>");
    job_.set_template_name("naive");
    job_.set_state(v1::JOB_STATE_SUCCEEDED);
    job_.set_trials_done(5);
    events_ = {Event(1, 64, 4, v1::TRIAL_STATUS_OK, 20),
               Event(2, 128, 4, v1::TRIAL_STATUS_OK, 12),
               Event(3, 128, 8, v1::TRIAL_STATUS_INCORRECT, 0),
               Event(4, 64, 8, v1::TRIAL_STATUS_OK, 15),
               Event(5, 256, 8, v1::TRIAL_STATUS_COMPILE_ERROR, 0)};
    *job_.mutable_best() = events_[1].trial();
  }
  v1::Job job_;
  std::vector<v1::TrialEvent> events_;
};

TEST_F(ReportTest, IsOneSelfContainedPage) {
  const std::string html = JobReportHtml(job_, events_);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_THAT(html, HasSubstr("</html>"));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  // Nothing is fetched when it is viewed: the only URL is the SVG namespace.
  EXPECT_EQ(Count(html, "https?://"), Count(html, "<svg "));
  // Names are escaped.
  EXPECT_THAT(html, HasSubstr("j&lt;1&gt;"));
  EXPECT_THAT(html, Not(HasSubstr("j<1>")));
  // Every opened element of the plots is closed.
  EXPECT_EQ(Count(html, "<svg "), Count(html, "</svg>"));
  EXPECT_EQ(Count(html, "<table>"), Count(html, "</table>"));
}

TEST_F(ReportTest, PlotsEveryTrialAndMarksFailures) {
  const std::string html = JobReportHtml(job_, events_);
  // Progress plot plus one plot per parameter.
  EXPECT_EQ(Count(html, "<svg "), 3);
  // Progress: one point per correct trial, one mark per failed one; then
  // each parameter plot has the three correct trials again.
  EXPECT_EQ(Count(html, "class=\"trial\""), 3 + 2 * 3);
  EXPECT_EQ(Count(html, "class=\"fail\""), 2);
  EXPECT_THAT(html, HasSubstr("incorrect"));
  EXPECT_THAT(html, HasSubstr("compile_error"));
  // The best-so-far line steps down at trial 2 and stays.
  EXPECT_EQ(Count(html, "class=\"best\""), 1);
  // BLOCK has three values with correct trials: 64 (2 trials) and 128 (1).
  EXPECT_THAT(html, HasSubstr(">64 (2)<"));
  EXPECT_THAT(html, HasSubstr(">128 (1)<"));
}

TEST_F(ReportTest, TheTableRanksTheFastestCorrectTrials) {
  const std::string html = JobReportHtml(job_, events_);
  const size_t table = html.find("<table>");
  ASSERT_NE(table, std::string::npos);
  const std::string rows = html.substr(table);
  EXPECT_EQ(Count(rows, "<tr><td>"), 3);
  const size_t first = rows.find("12.00 us");
  const size_t second = rows.find("15.00 us");
  const size_t third = rows.find("20.00 us");
  EXPECT_LT(first, second);
  EXPECT_LT(second, third);
  EXPECT_NE(third, std::string::npos);
}

TEST_F(ReportTest, TheTableSaysWhichWereTimedInTurns) {
  v1::Latency* l = events_[1].mutable_trial()->mutable_latency();
  l->set_samples(30);
  l->set_timed_against(1);
  const std::string html = JobReportHtml(job_, events_);
  EXPECT_THAT(html, HasSubstr("<td>30, in turns with 1</td>"));
  EXPECT_THAT(html, HasSubstr("<td>15</td>"));
}

v1::SdpaComparisonRow Row(const std::string& config, double us) {
  v1::SdpaComparisonRow r;
  r.set_template_name("naive");
  r.set_config(config);
  r.set_us(us);
  r.set_cudnn_us(10);
  r.set_flash_us(16);
  r.set_tflops(50);
  r.set_finite(true);
  return r;
}

TEST_F(ReportTest, AComparisonRunShowsTheWinnerBesideSdpa) {
  JobComparison c;
  c.run.set_gpu("NVIDIA H100");
  c.run.set_commit("abc<1>");
  c.rows = {Row("BLOCK=128,WARPS=4", 8), Row("BLOCK=64,WARPS=4", 12.5)};
  const std::string html = JobReportHtml(job_, events_, &c);
  const size_t section = html.find("<h2>Beside PyTorch SDPA</h2>");
  ASSERT_NE(section, std::string::npos);
  const std::string part = html.substr(section);
  EXPECT_THAT(part, HasSubstr("abc&lt;1&gt;"));
  EXPECT_THAT(part, HasSubstr("naive (this job's winner)"));
  EXPECT_EQ(Count(part, "this job's winner"), 1);
  EXPECT_THAT(part, Not(HasSubstr("did not time this job's winner")));
  // cuDNN 10 us and flash 16 us against 8 us, then against 12.5 us.
  EXPECT_THAT(part, HasSubstr("<td>1.25x</td><td>2.00x</td>"));
  EXPECT_THAT(part, HasSubstr("<td>0.80x</td><td>1.28x</td>"));
  // One bar per kernel timed and one per SDPA backend.
  EXPECT_EQ(Count(part, "class=\"ours\""), 2);
  EXPECT_EQ(Count(part, "class=\"sdpa\""), 2);
  EXPECT_EQ(Count(html, "<svg "), Count(html, "</svg>"));
}

TEST_F(ReportTest, AComparisonWithoutTheWinnerSaysSo) {
  JobComparison c;
  c.rows = {Row("BLOCK=64,WARPS=4", 12.5)};
  c.rows[0].clear_flash_us();
  const std::string html = JobReportHtml(job_, events_, &c);
  EXPECT_THAT(html, HasSubstr("did not time this job's winner"));
  EXPECT_THAT(html, Not(HasSubstr("(this job's winner)")));
  // SDPA flash did not run: no bar, no ratio.
  EXPECT_EQ(Count(html, "class=\"sdpa\""), 1);
  EXPECT_THAT(html, HasSubstr("<td>0.80x</td><td>-</td>"));
}

TEST_F(ReportTest, NoComparisonNoSection) {
  EXPECT_THAT(JobReportHtml(job_, events_), Not(HasSubstr("PyTorch SDPA")));
}

TEST_F(ReportTest, AJobWithoutTrialsStillRenders) {
  const std::string html = JobReportHtml(job_, {});
  EXPECT_THAT(html, HasSubstr("</html>"));
  EXPECT_EQ(Count(html, "<tr><td>"), 0);
}

}  // namespace
}  // namespace evotune
