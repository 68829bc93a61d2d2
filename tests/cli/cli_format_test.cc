#include "tuner/cli/cli_format.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// A result of `name` with one parameter, measured at `median_us` (none: not
// measured) and predicted at `predicted_us`.
void AddResult(v1::QueryBestResponse& best, const std::string& name,
               int64_t splits, double median_us, double predicted_us) {
  v1::RankedConfig* r = best.add_results();
  r->set_template_name(name);
  v1::ParamValue* p = r->mutable_trial()->mutable_config()->add_params();
  p->set_name("KV_SPLITS");
  p->set_value(splits);
  if (median_us > 0) {
    r->mutable_trial()->set_status(v1::TRIAL_STATUS_OK);
    r->mutable_trial()->mutable_latency()->set_median_us(median_us);
  }
  r->set_predicted_us(predicted_us);
}

v1::QueryBestResponse Predicted() {
  v1::QueryBestResponse best;
  best.set_transferred(true);
  best.set_predicted(true);
  best.mutable_source_problem()->set_batch(4);
  best.mutable_source_problem()->set_seq_k(16384);
  return best;
}

// A fitted config first: the header says so and names the source of the
// transfers after it; its row is marked fitted, without latencies.
TEST(CliFormatTest, AFittedConfigFirstIsMarkedAndNotMeasured) {
  v1::QueryBestResponse best = Predicted();
  AddResult(best, "decode_fwd", 64, 0, 10.1);
  best.mutable_results(0)->set_fitted(true);
  AddResult(best, "decode_fwd", 32, 12.5, 10.3);
  const std::string out = FormatBest(best);
  EXPECT_THAT(out, HasSubstr("first the config its template fits to this "
                             "problem (TRIAL fitted, not measured)"));
  EXPECT_THAT(out,
              ContainsRegex("KV_SPLITS=64 +10.10 us +- +- +- +- +fitted\n"));
  EXPECT_THAT(out, ContainsRegex("KV_SPLITS=32 +10.30 us +12.50 us"));
}

// Without a fitted config: the transfers alone, the first one's source named.
TEST(CliFormatTest, PredictedTransfersNameTheFirstOnesSource) {
  v1::QueryBestResponse best = Predicted();
  AddResult(best, "decode_fwd", 32, 12.5, 10.3);
  const std::string out = FormatBest(best);
  EXPECT_THAT(out, HasSubstr("ranked by this GPU's cost model"));
  EXPECT_THAT(out, HasSubstr("the first from"));
  EXPECT_THAT(out, Not(HasSubstr("fitted")));
}

// The templates' defaults: the header says why without claiming that
// nothing tuned runs here (a template less suited to the problem may have
// been tuned, as naive before a decode problem is asked).
TEST(CliFormatTest, DefaultsSayWhyAndThatTheyWereNotMeasured) {
  v1::QueryBestResponse best;
  best.set_defaults(true);
  AddResult(best, "decode_fwd", 16, 0, 0);
  const std::string out = FormatBest(best);
  EXPECT_THAT(out, HasSubstr("for the templates that suit this problem best"));
  EXPECT_THAT(out, HasSubstr("not measured (tune it: evotune submit)"));
  EXPECT_THAT(out, Not(HasSubstr("nothing tuned")));
}

// Configs timed again together after their search: marked, and the mark
// explained once.
TEST(CliFormatTest, ConfigsTimedInTurnsAreMarked) {
  v1::QueryBestResponse best;
  AddResult(best, "flash_fwd", 1, 10.5, 0);
  AddResult(best, "flash_fwd", 2, 10.75, 0);
  AddResult(best, "flash_fwd", 4, 11.0, 0);
  for (int i : {0, 1}) {
    best.mutable_results(i)
        ->mutable_trial()
        ->mutable_latency()
        ->set_timed_against(4);
  }
  const std::string out = FormatBest(best);
  EXPECT_THAT(out, ContainsRegex("KV_SPLITS=1 +10.50 us\\* "));
  EXPECT_THAT(out, ContainsRegex("KV_SPLITS=2 +10.75 us\\* "));
  EXPECT_THAT(out, ContainsRegex("KV_SPLITS=4 +11.00 us "));
  EXPECT_THAT(out,
              HasSubstr("*: timed again once a search of the problem ended"));
  best.mutable_results(0)
      ->mutable_trial()
      ->mutable_latency()
      ->set_timed_against(0);
  best.mutable_results(1)
      ->mutable_trial()
      ->mutable_latency()
      ->set_timed_against(0);
  EXPECT_THAT(FormatBest(best), Not(HasSubstr("timed again")));
}

// A template's FP8 inputs are listed, with the devices it serves FP8
// attention on; a template of 16-bit inputs alone has no such line.
TEST(CliFormatTest, TemplatesShowTheirFp8Inputs) {
  v1::ListTemplatesResponse templates;
  templates.add_templates()->set_name("plain");
  v1::TemplateInfo* cache = templates.add_templates();
  cache->set_name("cache");
  cache->set_kv_fp8(true);
  v1::TemplateInfo* fp8 = templates.add_templates();
  fp8->set_name("fp8");
  fp8->set_q_fp8(true);
  fp8->add_q_fp8_compute_capabilities(89);
  fp8->add_q_fp8_compute_capabilities(120);
  const std::string out = FormatTemplates(templates);
  EXPECT_THAT(out, ContainsRegex("plain @[^\n]*\n[^\n]*\n  head_dim "
                                 "[^\n]*\ncache @"));
  EXPECT_THAT(out, HasSubstr("  e4m3 K and V (an FP8 KV cache)\n"));
  EXPECT_THAT(out, HasSubstr("  e4m3 Q, K and V (FP8 attention on compute "
                             "capability 8.9, 12.0)\n"));
}

}  // namespace
}  // namespace evotune
