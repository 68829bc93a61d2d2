// evotune: the command-line client of evotuned.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/config.h"
#include "core/envelope.h"
#include "evotune/v1/evotune.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "tuner/cli/cli_format.h"
#include "tuner/cli/comparison.h"
#include "tuner/cli/export.h"
#include "tuner/cli/model_config.h"
#include "tuner/cli/model_report.h"
#include "tuner/cli/report.h"
#include "tuner/cli/tune_model.h"
#include "tuner/common/help.h"
#include "tuner/search/strategy_registry.h"
#include "tuner/wire/client_flags.h"
#include "tuner/wire/grpc_lifetime.h"
#include "tuner/wire/kernel_bundle.h"
#include "tuner/wire/message_convert.h"

ABSL_FLAG(std::string, address, "",
          "daemon address (default: $EVOTUNE_ADDRESS or 127.0.0.1:7433)");
ABSL_FLAG(bool, json, false, "print JSON instead of tables");
ABSL_FLAG(double, timeout_s, 30, "deadline of unary calls, in seconds");
// Problem (submit, best). Defaults are the seed problem.
ABSL_FLAG(std::string, template_name, "",
          "kernel template (submit: empty means the one ranked first for "
          "the problem; best: empty means all)");
ABSL_FLAG(int, batch, 1, "batch size");
ABSL_FLAG(int, heads, 8, "query heads");
ABSL_FLAG(int, kv_heads, 0, "key/value heads (0: same as --heads)");
ABSL_FLAG(int, seq_q, 512, "query length");
ABSL_FLAG(int, seq_k, 0, "key length (0: same as --seq_q)");
ABSL_FLAG(int, head_dim, 64, "head dimension (of queries and keys)");
ABSL_FLAG(int, head_dim_v, 0,
          "head dimension of values and the output where it differs "
          "(DeepSeek's MLA: --head_dim=192 --head_dim_v=128; 0: --head_dim)");
ABSL_FLAG(bool, causal, false, "causal mask (aligned bottom-right)");
ABSL_FLAG(int, window_left, -1,
          "sliding window: keys a row sees before its diagonal (-1: no "
          "bound; FlashAttention's window_size[0])");
ABSL_FLAG(int, window_right, -1,
          "sliding window: keys a row sees after its diagonal (-1: no bound; "
          "with --causal, -1)");
ABSL_FLAG(double, softcap, 0,
          "logit softcapping: scores become softcap * tanh(score / softcap) "
          "(0: none; Gemma 2's is 50)");
ABSL_FLAG(bool, sinks, false,
          "attention sinks: a logit per query head joins its softmax "
          "(gpt-oss's)");
ABSL_FLAG(bool, alibi, false,
          "ALiBi: each score loses slope * its distance from the diagonal, a "
          "slope per query head that the call passes (BLOOM's, MPT's)");
ABSL_FLAG(std::string, dtype, "fp16", "fp16 or bf16");
ABSL_FLAG(std::string, kv_dtype, "",
          "the type of K and V: empty for --dtype's, or e4m3 (an FP8 KV "
          "cache)");
ABSL_FLAG(std::string, q_dtype, "",
          "the type of Q: empty for --dtype's, or e4m3 (FP8 attention, with "
          "--kv_dtype=e4m3; --dtype is the output's)");
ABSL_FLAG(std::string, layout, "bhsd",
          "bhsd (fixed lengths), thd (varlen: packed, cu_seqlens; seq_q and "
          "seq_k bound a bucket), cache (KV cache, seqused_k) or paged (a "
          "paged KV cache: a block table of --page_size pages); tune-model: "
          "the layout of the model's calls");
ABSL_FLAG(int, page_size, 0, "keys per page of --layout=paged (16 to 256)");
ABSL_FLAG(std::string, device, "", "GPU name (default: the daemon's)");
// Search (submit).
ABSL_FLAG(int, max_trials, 50, "submit: trial budget");
ABSL_FLAG(double, max_seconds, 3600, "submit: time budget in seconds");
ABSL_FLAG(std::string, strategy, "evolutionary",
          "submit, tune-model: the search strategy (listed below with their "
          "options)");
ABSL_FLAG(std::string, strategy_options, "",
          "submit, tune-model: options of the strategy, NAME=value,... (e.g. "
          "population=16,patience=4)");
ABSL_FLAG(uint64_t, seed, 1, "submit: seed of the search");
ABSL_FLAG(bool, watch, false, "submit: watch the job until it finishes");
// Others.
ABSL_FLAG(int, k, 5, "best: how many configs");
ABSL_FLAG(std::string, tune_on_miss, "",
          "best: yes or no: start a background search when the problem has "
          "no results of its own (default: the daemon's --tune_on_miss)");
ABSL_FLAG(std::string, config, "",
          "bench: the config to run, NAME=value,... (see `evotune templates`)");
ABSL_FLAG(std::string, state, "", "jobs: only jobs in this state");
ABSL_FLAG(uint64_t, from_sequence, 0, "watch: skip events up to this one");
ABSL_FLAG(std::string, output, "",
          "report: the HTML file to write (default: evotune-JOB.html); "
          "export: the bundle to write (default: evotune-kernels.evtb); "
          "tune-model: the bundle to write (default: evotune-model.evtb); "
          "model-report: the HTML file (default: evotune-model.html)");
ABSL_FLAG(std::string, problems, "",
          "export: problem keys, comma-separated, or a file of one per line "
          "(default: the problem flags' one)");
ABSL_FLAG(std::string, compare, "",
          "report, model-report: a comparison run (bench/sdpa_compare.py "
          "--json) whose rows for the job's problem (each bucket's) are shown "
          "beside PyTorch SDPA");
ABSL_FLAG(std::string, model_config, "",
          "tune-model, model-report: the model's config.json (Hugging "
          "Face), or its fields as a JSON object ('{\"num_attention_heads\": "
          "32, ...}'); without it, the model of --heads, --kv_heads, "
          "--head_dim, --dtype, --window_left, --softcap and --sinks");
ABSL_FLAG(int, max_batch, 256,
          "tune-model: sequences of a decode step, at most");
ABSL_FLAG(int, max_context, 8192,
          "tune-model: keys a sequence attends to, at most");
ABSL_FLAG(int, prefill_chunk, 2048,
          "tune-model: queries of a prefill chunk against a prefix (0: "
          "none; packed layouts then bucket steps of whole prompts)");
ABSL_FLAG(int, max_prefill_tokens, 8192,
          "tune-model: tokens of one whole-prompt prefill call, at most");
ABSL_FLAG(std::string, decode_queries, "1,4",
          "tune-model: queries per sequence of a decode step (above 1: "
          "speculative decoding)");
ABSL_FLAG(int, bucket_trials, 12, "tune-model: trial budget of each bucket");
ABSL_FLAG(bool, dry_run, false,
          "tune-model: print the buckets (problem keys) and stop");
ABSL_FLAG(absl::Duration, budget, absl::Minutes(10),
          "tune-model: time for the searches (e.g. 10m); then unfinished ones "
          "are cancelled and the bundle is written");
ABSL_FLAG(double, reconnect_s, 120,
          "watch: keep reconnecting this long when the daemon is unreachable");

namespace evotune {
namespace {

class Client {
 public:
  // The daemon's address, token and TLS from the flags and environment;
  // INVALID_ARGUMENT naming a bad flag.
  static absl::StatusOr<std::unique_ptr<Client>> FromFlags() {
    std::string address = absl::GetFlag(FLAGS_address);
    if (address.empty()) {
      const char* env = std::getenv("EVOTUNE_ADDRESS");
      address = env ? env : "127.0.0.1:7433";
    }
    absl::StatusOr<DaemonCredentials> credentials =
        DaemonCredentialsFromFlags();
    if (!credentials.ok()) return credentials.status();
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        DaemonChannel(address, credentials->tls);
    if (!channel.ok()) return channel.status();
    return std::make_unique<Client>(address, credentials->token,
                                    *std::move(channel));
  }

  Client(std::string address, std::string token,
         std::shared_ptr<grpc::Channel> channel)
      : address_(std::move(address)),
        token_(std::move(token)),
        stub_(v1::Tuner::NewStub(std::move(channel))) {}

  // A context with the token and, for unary calls, the deadline.
  std::unique_ptr<grpc::ClientContext> Context(bool unary) const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
    if (unary) {
      ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(
                            absl::GetFlag(FLAGS_timeout_s) * 1000)));
    }
    return ctx;
  }

  v1::Tuner::Stub* stub() { return stub_.get(); }
  const std::string& address() const { return address_; }

 private:
  std::string address_;
  std::string token_;
  std::unique_ptr<v1::Tuner::Stub> stub_;
};

int Fail(const std::string& message) {
  std::cerr << "evotune: " << message << "\n";
  return 1;
}

int FailRpc(const Client& client, const grpc::Status& s) {
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return Fail(absl::StrCat("cannot reach evotuned at ", client.address(),
                             " (", s.error_message(), ")"));
  }
  if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    return Fail(absl::StrCat(
        "evotuned at ", client.address(), " refused the request: ",
        s.error_message(), " (set --token or EVOTUNE_TOKEN to the daemon's)"));
  }
  return Fail(s.error_message());
}

void PrintJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  std::cout << out << std::endl;
}

// The problem's sizes from the flags (--seq_k defaults to --seq_q).
absl::Status FillSizes(v1::Problem* p) {
  const int seq_k = absl::GetFlag(FLAGS_seq_k);
  for (int flag :
       {absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_heads),
        absl::GetFlag(FLAGS_kv_heads), absl::GetFlag(FLAGS_seq_q), seq_k,
        absl::GetFlag(FLAGS_head_dim), absl::GetFlag(FLAGS_head_dim_v)}) {
    if (flag < 0) {
      return absl::InvalidArgumentError(
          "--batch, --heads, --kv_heads, --seq_q, --seq_k, --head_dim, "
          "--head_dim_v must not be negative");
    }
  }
  p->set_batch(absl::GetFlag(FLAGS_batch));
  p->set_heads(absl::GetFlag(FLAGS_heads));
  p->set_kv_heads(absl::GetFlag(FLAGS_kv_heads));
  p->set_seq_q(absl::GetFlag(FLAGS_seq_q));
  p->set_seq_k(seq_k == 0 ? absl::GetFlag(FLAGS_seq_q) : seq_k);
  p->set_head_dim(absl::GetFlag(FLAGS_head_dim));
  p->set_head_dim_v(absl::GetFlag(FLAGS_head_dim_v));
  return absl::OkStatus();
}

// The mask and score mods from the flags.
absl::Status FillScoreMods(v1::Problem* p) {
  for (auto [name, bound] :
       {std::pair{"--window_left", absl::GetFlag(FLAGS_window_left)},
        {"--window_right", absl::GetFlag(FLAGS_window_right)}}) {
    if (bound < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": -1 (no bound) or a key count, got ", bound));
    }
  }
  p->set_causal(absl::GetFlag(FLAGS_causal));
  if (absl::GetFlag(FLAGS_window_left) >= 0) {
    p->set_window_left(absl::GetFlag(FLAGS_window_left));
  }
  if (absl::GetFlag(FLAGS_window_right) >= 0) {
    p->set_window_right(absl::GetFlag(FLAGS_window_right));
  }
  p->set_softcap(static_cast<float>(absl::GetFlag(FLAGS_softcap)));
  p->set_sinks(absl::GetFlag(FLAGS_sinks));
  p->set_alibi(absl::GetFlag(FLAGS_alibi));
  return absl::OkStatus();
}

// --dtype, and --kv_dtype / --q_dtype where they name e4m3.
absl::Status FillDTypes(v1::Problem* p) {
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype != "fp16" && dtype != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype: unknown dtype \"", dtype, "\" (fp16 or bf16)"));
  }
  p->set_dtype(dtype == "fp16" ? v1::DTYPE_FP16 : v1::DTYPE_BF16);
  const std::string kv_dtype = absl::GetFlag(FLAGS_kv_dtype);
  if (kv_dtype == "e4m3") {
    p->set_kv_dtype(v1::DTYPE_E4M3);
  } else if (!kv_dtype.empty() && kv_dtype != dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_dtype: unknown K/V type \"", kv_dtype,
                     "\" (empty for --dtype's, or e4m3)"));
  }
  const std::string q_dtype = absl::GetFlag(FLAGS_q_dtype);
  if (q_dtype == "e4m3") {
    p->set_q_dtype(v1::DTYPE_E4M3);
  } else if (!q_dtype.empty() && q_dtype != dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("--q_dtype: unknown Q type \"", q_dtype,
                     "\" (empty for --dtype's, or e4m3)"));
  }
  return absl::OkStatus();
}

// --layout and --page_size.
absl::Status FillLayout(v1::Problem* p) {
  absl::StatusOr<Layout> layout = ParseLayout(absl::GetFlag(FLAGS_layout));
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--layout: ", layout.status().message()));
  }
  const int page_size = absl::GetFlag(FLAGS_page_size);
  if (page_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--page_size: must be positive, got ", page_size));
  }
  p->set_layout(LayoutToProto(*layout));
  p->set_page_size(static_cast<uint32_t>(page_size));
  return absl::OkStatus();
}

// The problem of the problem flags; false with `error` naming the flag.
bool FillProblem(v1::Problem* p, std::string* error) {
  for (auto fill : {FillSizes, FillScoreMods, FillDTypes, FillLayout}) {
    if (absl::Status s = fill(p); !s.ok()) {
      *error = std::string(s.message());
      return false;
    }
  }
  return true;
}

bool IsFinal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

// Streams the job's progress, reconnecting from the last sequence number when
// the daemon goes away. Exit code 0 only when the job succeeded.
int Watch(Client& client, const std::string& job_id) {
  const bool json = absl::GetFlag(FLAGS_json);
  const bool tty = isatty(STDOUT_FILENO) && !json;
  uint64_t last = absl::GetFlag(FLAGS_from_sequence);
  absl::Time unreachable_since = absl::InfiniteFuture();
  v1::Job job;
  bool have_job = false;
  while (true) {
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    req.set_from_sequence(last);
    auto ctx = client.Context(false);
    std::unique_ptr<grpc::ClientReader<v1::JobUpdate>> reader =
        client.stub()->WatchJob(ctx.get(), req);
    v1::JobUpdate update;
    while (reader->Read(&update)) {
      unreachable_since = absl::InfiniteFuture();
      job = update.job();
      have_job = true;
      if (update.has_event()) last = update.event().sequence();
      if (json) {
        PrintJson(update);
      } else if (tty) {
        std::cout << "\r\033[K" << FormatProgress(job, 30) << std::flush;
      } else if (update.has_event()) {
        const v1::Trial& t = update.event().trial();
        std::cout << FormatProgress(job, 20) << "  | #" << last << " "
                  << FormatConfig(t.config()) << " "
                  << TrialStatusLabel(t.status()) << " " << FormatLatency(t)
                  << (update.event().cached() ? " (stored)" : "") << "\n"
                  << std::flush;
      }
    }
    const grpc::Status s = reader->Finish();
    if (s.ok() && have_job && IsFinal(job.state())) break;
    if (s.ok() || s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      // Daemon restarting: retry from the last event we saw.
      const absl::Time now = absl::Now();
      if (unreachable_since == absl::InfiniteFuture()) unreachable_since = now;
      if (now - unreachable_since >
          absl::Seconds(absl::GetFlag(FLAGS_reconnect_s))) {
        if (tty) std::cout << "\n";
        return FailRpc(client, s);
      }
      absl::SleepFor(absl::Milliseconds(300));
      continue;
    }
    if (tty) std::cout << "\n";
    return FailRpc(client, s);
  }
  if (tty) std::cout << "\n";
  if (!json) {
    std::cout << "job " << job.job_id() << " " << StateName(job.state())
              << (job.error().empty() ? "" : ": " + job.error()) << ": "
              << job.trials_done() << " trials in "
              << FormatDuration(job.elapsed_seconds());
    if (job.has_best()) {
      std::cout << ", best " << FormatLatency(job.best()) << " with "
                << FormatConfig(job.best().config());
    }
    std::cout << "\n";
  }
  return job.state() == v1::JOB_STATE_SUCCEEDED ? 0 : 1;
}

using Args = std::vector<std::string>;  // After the command's name.

// The answer of a unary call: JSON with --json, else `format`'s text.
template <typename Response>
int PrintOrFail(Client& client, const grpc::Status& s, const Response& resp,
                std::string (*format)(const Response&)) {
  if (!s.ok()) return FailRpc(client, s);
  if (absl::GetFlag(FLAGS_json)) {
    PrintJson(resp);
  } else {
    std::cout << format(resp);
  }
  return 0;
}

int RunTemplates(Client& client, const Args&) {
  v1::ListTemplatesResponse resp;
  grpc::Status s =
      client.stub()->ListTemplates(client.Context(true).get(), {}, &resp);
  return PrintOrFail(client, s, resp, FormatTemplates);
}

// --strategy and --strategy_options into a request that has them
// (SubmitSearchRequest, TuneModelRequest); INVALID_ARGUMENT naming the flag.
template <typename Request>
absl::Status SetStrategy(Request& req) {
  absl::StatusOr<StrategyOptions> options =
      ParseStrategyOptions(absl::GetFlag(FLAGS_strategy_options));
  if (!options.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", options.status().message()));
  }
  req.set_strategy(absl::GetFlag(FLAGS_strategy));
  req.mutable_strategy_options()->insert(options->begin(), options->end());
  return absl::OkStatus();
}

int RunSubmit(Client& client, const Args&) {
  v1::SubmitSearchRequest req;
  std::string error;
  if (!FillProblem(req.mutable_problem(), &error)) return Fail(error);
  req.set_template_name(absl::GetFlag(FLAGS_template_name));
  req.mutable_budget()->set_max_trials(
      std::max(0, absl::GetFlag(FLAGS_max_trials)));
  req.mutable_budget()->set_max_seconds(absl::GetFlag(FLAGS_max_seconds));
  if (absl::Status s = SetStrategy(req); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  req.set_seed(absl::GetFlag(FLAGS_seed));
  req.set_device(absl::GetFlag(FLAGS_device));
  v1::SubmitSearchResponse resp;
  grpc::Status s =
      client.stub()->SubmitSearch(client.Context(true).get(), req, &resp);
  if (!s.ok()) return FailRpc(client, s);
  if (absl::GetFlag(FLAGS_json)) {
    PrintJson(resp);
  } else {
    std::cout << resp.job_id() << "\n";
  }
  return absl::GetFlag(FLAGS_watch) ? Watch(client, resp.job_id()) : 0;
}

int RunWatch(Client& client, const Args& args) {
  return Watch(client, args[0]);
}

int RunJob(Client& client, const Args& args) {
  v1::GetJobRequest req;
  req.set_job_id(args[0]);
  v1::Job resp;
  grpc::Status s =
      client.stub()->GetJob(client.Context(true).get(), req, &resp);
  return PrintOrFail(client, s, resp, FormatJob);
}

int RunCancel(Client& client, const Args& args) {
  v1::CancelJobRequest req;
  req.set_job_id(args[0]);
  v1::Job resp;
  grpc::Status s =
      client.stub()->CancelJob(client.Context(true).get(), req, &resp);
  return PrintOrFail(client, s, resp, FormatJob);
}

int RunJobs(Client& client, const Args&) {
  v1::ListJobsRequest req;
  const std::string state = absl::GetFlag(FLAGS_state);
  if (!state.empty()) {
    v1::JobState value;
    std::string upper = "JOB_STATE_";
    for (char c : state) upper += static_cast<char>(std::toupper(c));
    if (!v1::JobState_Parse(upper, &value) ||
        value == v1::JOB_STATE_UNSPECIFIED) {
      return Fail(
          absl::StrCat("--state: unknown state \"", state,
                       "\" (queued, running, succeeded, failed, cancelled)"));
    }
    req.set_state(value);
  }
  v1::ListJobsResponse resp;
  grpc::Status s =
      client.stub()->ListJobs(client.Context(true).get(), req, &resp);
  return PrintOrFail(client, s, resp, FormatJobsTable);
}

int RunBest(Client& client, const Args&) {
  v1::QueryBestRequest req;
  std::string error;
  if (!FillProblem(req.mutable_problem(), &error)) return Fail(error);
  req.set_template_name(absl::GetFlag(FLAGS_template_name));
  req.set_device(absl::GetFlag(FLAGS_device));
  req.set_k(std::max(0, absl::GetFlag(FLAGS_k)));
  if (const std::string tune = absl::GetFlag(FLAGS_tune_on_miss);
      tune == "yes" || tune == "no") {
    req.set_tune_on_miss(tune == "yes");
  } else if (!tune.empty()) {
    return Fail(absl::StrCat("--tune_on_miss: yes or no, got \"", tune, "\""));
  }
  v1::QueryBestResponse resp;
  grpc::Status s =
      client.stub()->QueryBest(client.Context(true).get(), req, &resp);
  return PrintOrFail(client, s, resp, FormatBest);
}

int RunBench(Client& client, const Args&) {
  v1::EvaluateConfigRequest req;
  std::string error;
  if (!FillProblem(req.mutable_problem(), &error)) return Fail(error);
  req.set_template_name(absl::GetFlag(FLAGS_template_name));
  req.set_device(absl::GetFlag(FLAGS_device));
  absl::StatusOr<Config> config = ParseConfigKey(absl::GetFlag(FLAGS_config));
  if (!config.ok()) {
    return Fail(absl::StrCat("--config: ", config.status().message()));
  }
  for (const auto& [name, value] : *config) {
    v1::ParamValue* p = req.mutable_config()->add_params();
    p->set_name(name);
    p->set_value(value);
  }
  v1::EvaluateConfigResponse resp;
  // Compiling and measuring can take a while on a busy daemon.
  auto ctx = client.Context(false);
  grpc::Status s = client.stub()->EvaluateConfig(ctx.get(), req, &resp);
  if (!s.ok()) return FailRpc(client, s);
  if (absl::GetFlag(FLAGS_json)) {
    PrintJson(resp);
  } else {
    std::cout << FormatEvaluation(req, resp);
  }
  return resp.trial().status() == v1::TRIAL_STATUS_OK ? 0 : 1;
}

// The job's trials so far, in order: WatchJob from the start, read until
// it reaches the trials the job had when asked (a finished job's stream
// ends by itself).
absl::StatusOr<std::vector<v1::TrialEvent>> JobEvents(Client& client,
                                                      const v1::Job& job) {
  v1::WatchJobRequest req;
  req.set_job_id(job.job_id());
  auto ctx = client.Context(false);
  std::unique_ptr<grpc::ClientReader<v1::JobUpdate>> reader =
      client.stub()->WatchJob(ctx.get(), req);
  std::vector<v1::TrialEvent> events;
  v1::JobUpdate update;
  while (events.size() < job.trials_done() && reader->Read(&update)) {
    if (update.has_event()) events.push_back(update.event());
  }
  if (events.size() >= job.trials_done()) ctx->TryCancel();
  const grpc::Status s = reader->Finish();
  if (!s.ok() && s.error_code() != grpc::StatusCode::CANCELLED) {
    return absl::UnavailableError(s.error_message());
  }
  return events;
}

// --compare's file and its rows for the job; errors name the flag.
absl::StatusOr<JobComparison> LoadComparison(const std::string& file,
                                             const v1::Job& job) {
  const std::string what = absl::StrCat("--compare: ", file);
  absl::StatusOr<v1::SdpaComparison> run = ReadComparison(file);
  if (!run.ok()) {
    return absl::Status(run.status().code(),
                        absl::StrCat("--compare: ", run.status().message()));
  }
  absl::StatusOr<std::vector<v1::SdpaComparisonRow>> rows =
      RowsForJob(*run, job, what);
  if (!rows.ok()) return rows.status();
  return JobComparison{*std::move(run), *std::move(rows)};
}

// Writes a report page to --output (or `fallback`) and prints its name;
// the exit code.
int WritePage(const std::string& fallback, const std::string& html) {
  std::string path = absl::GetFlag(FLAGS_output);
  if (path.empty()) path = fallback;
  std::ofstream out(path);
  out << html;
  out.close();
  if (!out) return Fail(absl::StrCat("--output: cannot write ", path));
  std::cout << path << "\n";
  return 0;
}

int RunReport(Client& client, const Args& args) {
  v1::GetJobRequest req;
  req.set_job_id(args[0]);
  v1::Job job;
  grpc::Status s = client.stub()->GetJob(client.Context(true).get(), req, &job);
  if (!s.ok()) return FailRpc(client, s);
  std::optional<JobComparison> comparison;
  if (const std::string file = absl::GetFlag(FLAGS_compare); !file.empty()) {
    absl::StatusOr<JobComparison> c = LoadComparison(file, job);
    if (!c.ok()) return Fail(std::string(c.status().message()));
    comparison = *std::move(c);
  }
  absl::StatusOr<std::vector<v1::TrialEvent>> events = JobEvents(client, job);
  if (!events.ok()) return Fail(std::string(events.status().message()));
  return WritePage(
      absl::StrCat("evotune-", job.job_id(), ".html"),
      JobReportHtml(job, *events, comparison ? &*comparison : nullptr));
}

// GetKernel for every problem, then one bundle file; nothing is written
// unless every problem got a kernel.
// Writes the kernels the daemon serves for `problems` (of `template_name`,
// empty: any) as one bundle at `path` (empty: evotune-kernels.evtb), with
// `bundle`'s other fields (what it is for), and prints its name; the exit
// code.
int ExportBundle(Client& client, const std::vector<Problem>& problems,
                 const std::string& template_name, v1::KernelBundle bundle,
                 std::string path) {
  bundle.set_created_unix_s(absl::ToUnixSeconds(absl::Now()));
  for (size_t i = 0; i < problems.size(); ++i) {
    v1::GetKernelRequest req;
    *req.mutable_problem() = ProblemToProto(problems[i]);
    req.set_template_name(template_name);
    req.set_device(absl::GetFlag(FLAGS_device));
    v1::Kernel* kernel = bundle.add_kernels();
    // A kernel compiles on its first request: allow minutes.
    std::unique_ptr<grpc::ClientContext> ctx = client.Context(false);
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::minutes(5));
    grpc::Status s = client.stub()->GetKernel(ctx.get(), req, kernel);
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      return FailRpc(client, s);
    }
    if (!s.ok()) {
      return Fail(
          absl::StrCat(ProblemKey(problems[i]), ": ", s.error_message()));
    }
    std::cerr << "[" << i + 1 << "/" << problems.size() << "] "
              << FormatExportedKernel(*kernel) << "\n";
  }
  if (path.empty()) path = "evotune-kernels.evtb";
  if (absl::Status s = WriteKernelBundle(path, std::move(bundle)); !s.ok()) {
    return Fail(absl::StrCat("--output: ", s.message()));
  }
  std::cout << path << "\n";
  return 0;
}

int RunExport(Client& client, const Args&) {
  std::vector<Problem> problems;
  if (const std::string spec = absl::GetFlag(FLAGS_problems); !spec.empty()) {
    absl::StatusOr<std::vector<Problem>> parsed = ParseProblemList(spec);
    if (!parsed.ok()) return Fail(std::string(parsed.status().message()));
    problems = *std::move(parsed);
  } else {
    v1::Problem p;
    std::string error;
    if (!FillProblem(&p, &error)) return Fail(error);
    absl::StatusOr<Problem> problem = ProblemFromProto(p);
    if (!problem.ok()) return Fail(std::string(problem.status().message()));
    problems.push_back(*problem);
  }
  return ExportBundle(client, problems, absl::GetFlag(FLAGS_template_name), {},
                      absl::GetFlag(FLAGS_output));
}

// tune-model's model from the problem flags, where no --model_config is
// given: --heads, --kv_heads, --head_dim (--head_dim_v), --dtype, and one
// kind of layer of --window_left, --softcap, --sinks and --alibi. One of
// them must differ from its default (the defaults alone are the seed
// problem's, and more likely a forgotten --model_config than a model).
absl::StatusOr<ModelAttention> ModelFromFlags() {
  bool given = false;
  for (const char* name :
       {"heads", "kv_heads", "head_dim", "head_dim_v", "dtype", "window_left",
        "softcap", "sinks", "alibi"}) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    given |= flag != nullptr && flag->CurrentValue() != flag->DefaultValue();
  }
  if (!given) {
    return absl::InvalidArgumentError(
        "--model_config: required (the model's config.json), or the model "
        "as flags: --heads, --kv_heads, --head_dim, --dtype (and "
        "--window_left, --softcap, --sinks, --alibi for its layers)");
  }
  v1::Problem p;
  std::string error;
  if (!FillProblem(&p, &error)) return absl::InvalidArgumentError(error);
  ModelAttention m;
  m.heads = p.heads();
  m.kv_heads = p.kv_heads() == 0 ? p.heads() : p.kv_heads();
  m.head_dim = p.head_dim();
  m.head_dim_v = p.head_dim_v();
  m.dtype = p.dtype() == v1::DTYPE_BF16 ? DType::kBf16 : DType::kFp16;
  m.kinds[0].window_left = absl::GetFlag(FLAGS_window_left);
  m.kinds[0].softcap = static_cast<float>(absl::GetFlag(FLAGS_softcap));
  m.kinds[0].sinks = absl::GetFlag(FLAGS_sinks);
  m.kinds[0].alibi = absl::GetFlag(FLAGS_alibi);
  return m;
}

// The model's attention into `req`; returns its kinds of layer, named.
std::vector<std::string> SetModel(const ModelAttention& m,
                                  v1::TuneModelRequest& req) {
  req.set_heads(m.heads);
  req.set_kv_heads(m.kv_heads);
  req.set_head_dim(m.head_dim);
  req.set_head_dim_v(m.head_dim_v);
  req.set_dtype(m.dtype == DType::kBf16 ? v1::DTYPE_BF16 : v1::DTYPE_FP16);
  std::vector<std::string> kinds;
  for (const LayerKind& kind : m.kinds) {
    v1::LayerKind* k = req.add_layer_kinds();
    if (kind.window_left >= 0) k->set_window_left(kind.window_left);
    k->set_softcap(kind.softcap);
    k->set_sinks(kind.sinks);
    k->set_alibi(kind.alibi);
    kinds.push_back(LayerKindName(kind));
  }
  return kinds;
}

// The serving envelope of the tune-model flags into `e`; returns its
// layout. INVALID_ARGUMENT naming the flag.
absl::StatusOr<Layout> SetEnvelope(v1::Envelope& e) {
  e.set_max_batch(std::max(0, absl::GetFlag(FLAGS_max_batch)));
  e.set_max_context(std::max(0, absl::GetFlag(FLAGS_max_context)));
  e.set_prefill_chunk(std::max(0, absl::GetFlag(FLAGS_prefill_chunk)));
  e.set_max_prefill_tokens(
      std::max(0, absl::GetFlag(FLAGS_max_prefill_tokens)));
  absl::StatusOr<Layout> layout = ParseLayout(absl::GetFlag(FLAGS_layout));
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--layout: ", layout.status().message()));
  }
  e.set_layout(LayoutToProto(*layout));
  e.set_page_size(std::max(0, absl::GetFlag(FLAGS_page_size)));
  for (absl::string_view q :
       absl::StrSplit(absl::GetFlag(FLAGS_decode_queries), ',')) {
    uint32_t n = 0;
    if (!absl::SimpleAtoi(q, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--decode_queries: \"", q, "\" is not a count"));
    }
    e.add_decode_queries(n);
  }
  return layout;
}

// The TuneModel request of the tune-model flags and the model's config (or
// the model's flags); `about` says what for. INVALID_ARGUMENT naming the
// flag or config field.
absl::StatusOr<v1::TuneModelRequest> ModelRequest(std::string* about) {
  const std::string path = absl::GetFlag(FLAGS_model_config);
  absl::StatusOr<ModelAttention> m =
      path.empty() ? ModelFromFlags()
                   : ReadModelConfig(path, absl::GetFlag(FLAGS_max_context));
  if (!m.ok()) return m.status();
  v1::TuneModelRequest req;
  const std::vector<std::string> kinds = SetModel(*m, req);
  absl::StatusOr<Layout> layout = SetEnvelope(*req.mutable_envelope());
  if (!layout.ok()) return layout.status();
  const v1::Envelope* e = &req.envelope();
  req.mutable_budget()->set_max_trials(
      std::max(0, absl::GetFlag(FLAGS_bucket_trials)));
  req.mutable_budget()->set_max_seconds(
      absl::ToDoubleSeconds(absl::GetFlag(FLAGS_budget)));
  req.set_device(absl::GetFlag(FLAGS_device));
  req.set_dry_run(absl::GetFlag(FLAGS_dry_run));
  if (absl::Status s = SetStrategy(req); !s.ok()) return s;
  *about = absl::StrCat(
      "tune-model ",
      !m->name.empty()      ? m->name
      : path.empty()        ? std::string("(flags)")
      : path.front() == '{' ? std::string("(fields given)")
                            : path,
      ": ", m->heads, " heads on ", m->kv_heads, ", head_dim ", m->head_dim,
      m->head_dim_v > 0 ? absl::StrCat(" (values ", m->head_dim_v, ")") : "",
      ", ", DTypeName(m->dtype), "; layers of ",
      absl::StrJoin(kinds, " and of "), "; batch up to ", e->max_batch(),
      ", context up to ", e->max_context(), ", prefill chunks of ",
      e->prefill_chunk(), ", prompts up to ", e->max_prefill_tokens(),
      " tokens, decode queries ", absl::GetFlag(FLAGS_decode_queries), "; ",
      LayoutName(*layout),
      *layout == Layout::kPaged
          ? absl::StrCat(" of ", e->page_size(), "-key pages")
          : "",
      req.strategy().empty() || req.strategy() == "evolutionary"
          ? ""
          : absl::StrCat("; ", req.strategy(), " searches"));
  return req;
}

// The share of their first OK trials' summed time the ended searches'
// best saved (-1 for none); each search's first time is asked for once
// and kept in `first_us` (0 where it has none).
double MeasuredGain(Client& client, const std::vector<v1::Job>& ended,
                    std::map<std::string, double>* first_us) {
  double first = 0, best = 0;
  for (const v1::Job& job : ended) {
    if (!job.has_best()) continue;
    auto it = first_us->find(job.job_id());
    if (it == first_us->end()) {
      absl::StatusOr<std::vector<v1::TrialEvent>> events =
          JobEvents(client, job);
      const std::optional<double> us =
          events.ok() ? FirstOkUs(*events) : std::nullopt;
      it = first_us->emplace(job.job_id(), us.value_or(0)).first;
    }
    if (it->second <= 0) continue;
    first += it->second;
    best += std::min(job.best().latency().median_us(), it->second);
  }
  return first > 0 ? GainShare(first, best) : -1;
}

// Follows the buckets' jobs until all end or the budget is spent (then
// cancels those left); progress on stderr. The exit code.
int FollowBuckets(Client& client, const v1::TuneModelResponse& buckets) {
  const absl::Time start = absl::Now();
  const absl::Duration budget = absl::GetFlag(FLAGS_budget);
  std::set<std::string> ids;
  for (const v1::ModelBucket& b : buckets.buckets()) ids.insert(b.job_id());
  std::vector<std::string> open;
  const bool tty = isatty(STDERR_FILENO);
  const double predicted = PredictedGain(buckets);
  std::map<std::string, double> first_us;  // Of each ended search.
  std::string shown;
  while (true) {
    v1::ListJobsResponse jobs;
    grpc::Status s = client.stub()->ListJobs(client.Context(true).get(),
                                             v1::ListJobsRequest(), &jobs);
    if (!s.ok()) return FailRpc(client, s);
    ModelProgress m;
    m.total = buckets.buckets_size();
    m.elapsed = absl::Now() - start;
    m.budget = budget;
    m.predicted_gain = predicted;
    std::vector<v1::Job> ended;
    open.clear();
    for (const v1::Job& job : jobs.jobs()) {
      if (ids.count(job.job_id()) == 0) continue;
      m.trials += job.trials_done();
      if (job.state() == v1::JOB_STATE_QUEUED ||
          job.state() == v1::JOB_STATE_RUNNING) {
        open.push_back(job.job_id());
      } else if (job.state() == v1::JOB_STATE_SUCCEEDED) {
        ended.push_back(job);
      }
    }
    m.done = m.total - static_cast<int>(open.size());
    m.measured_gain = MeasuredGain(client, ended, &first_us);
    const std::string line = FormatModelProgress(m);
    // A line per change where stderr is no terminal (a log).
    if (tty) {
      std::cerr << "\r" << line << std::flush;
    } else if (line.substr(0, line.rfind(',')) !=
               shown.substr(0, shown.rfind(','))) {
      std::cerr << line << "\n";
    }
    shown = line;
    if (open.empty() || absl::Now() - start >= budget) break;
    absl::SleepFor(absl::Milliseconds(500));
  }
  if (tty) std::cerr << "\n";
  for (const std::string& id : open) {
    v1::CancelJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    (void)client.stub()->CancelJob(client.Context(true).get(), req, &job);
  }
  if (!open.empty()) {
    std::cerr << "tune-model: the budget is spent; " << open.size()
              << " searches cancelled (their trials are kept; run again to "
                 "go on)\n";
  }
  return 0;
}

int RunTuneModel(Client& client, const Args&) {
  std::string about;
  absl::StatusOr<v1::TuneModelRequest> req = ModelRequest(&about);
  if (!req.ok()) return Fail(std::string(req.status().message()));
  v1::TuneModelResponse buckets;
  grpc::Status s =
      client.stub()->TuneModel(client.Context(true).get(), *req, &buckets);
  if (!s.ok()) return FailRpc(client, s);
  std::cerr << about << ": " << FormatModelPlan(buckets) << "\n";
  std::vector<Problem> problems;
  for (const v1::ModelBucket& b : buckets.buckets()) {
    problems.push_back(*ProblemFromProto(b.problem()));
  }
  if (req->dry_run()) {
    if (absl::GetFlag(FLAGS_json)) {
      PrintJson(buckets);
    } else {
      for (const Problem& p : problems) std::cout << ProblemKey(p) << "\n";
    }
    return 0;
  }
  if (int rc = FollowBuckets(client, buckets); rc != 0) return rc;
  std::string path = absl::GetFlag(FLAGS_output);
  if (path.empty()) path = "evotune-model.evtb";
  v1::KernelBundle head;
  head.set_about(about);
  *head.mutable_model() = *req;
  // A model of flags has no config text: the request holds its fields.
  const std::string config_flag = absl::GetFlag(FLAGS_model_config);
  if (!config_flag.empty() && config_flag.front() == '{') {  // The fields.
    head.set_model_config(config_flag);
  } else if (!config_flag.empty()) {
    std::ifstream config(config_flag);
    head.set_model_config(std::string(std::istreambuf_iterator<char>(config),
                                      std::istreambuf_iterator<char>()));
  }
  return ExportBundle(client, problems, "", std::move(head), path);
}

// The model run of the tune-model flags as an HTML page (ModelReportHtml):
// each bucket's deciding search, as TuneModel's dry run names it.
int RunModelReport(Client& client, const Args&) {
  std::string about;
  absl::StatusOr<v1::TuneModelRequest> req = ModelRequest(&about);
  if (!req.ok()) return Fail(std::string(req.status().message()));
  req->set_dry_run(true);
  std::optional<v1::SdpaComparison> run;
  if (const std::string file = absl::GetFlag(FLAGS_compare); !file.empty()) {
    absl::StatusOr<v1::SdpaComparison> read = ReadComparison(file);
    if (!read.ok()) {
      return Fail(absl::StrCat("--compare: ", read.status().message()));
    }
    run = *std::move(read);
  }
  v1::TuneModelResponse buckets;
  grpc::Status s =
      client.stub()->TuneModel(client.Context(true).get(), *req, &buckets);
  if (!s.ok()) return FailRpc(client, s);
  std::vector<BucketSearch> searches;
  for (const v1::ModelBucket& b : buckets.buckets()) {
    BucketSearch& search = searches.emplace_back();
    search.problem = b.problem();
    if (b.job_id().empty()) continue;
    v1::GetJobRequest get;
    get.set_job_id(b.job_id());
    s = client.stub()->GetJob(client.Context(true).get(), get, &search.job);
    if (!s.ok()) return FailRpc(client, s);
    absl::StatusOr<std::vector<v1::TrialEvent>> events =
        JobEvents(client, search.job);
    if (!events.ok()) return Fail(std::string(events.status().message()));
    search.events = *std::move(events);
  }
  return WritePage("evotune-model.html",
                   ModelReportHtml(about, searches, run ? &*run : nullptr));
}

// The commands: usage and help come from this table.
struct Command {
  const char* name;
  const char* args;   // Positional arguments after the name: "" or "JOB".
  const char* flags;  // The flags it mostly takes, for the usage line.
  const char* summary;
  int (*run)(Client& client, const Args& args);
};

constexpr Command kCommands[] = {
    {"templates", "", "", "list the daemon's kernel templates", RunTemplates},
    {"submit", "", "[--template_name=T] [problem] [--max_trials=N] [--watch]",
     "start a search; prints its job id", RunSubmit},
    {"watch", "JOB", "", "follow a job until it ends (exit 0 if it succeeded)",
     RunWatch},
    {"job", "JOB", "", "show a job", RunJob},
    {"jobs", "", "[--state=running]", "list jobs", RunJobs},
    {"cancel", "JOB", "", "cancel a job", RunCancel},
    {"best", "", "[--template_name=T] [problem] [--k=5] [--tune_on_miss=yes]",
     "the fastest validated configs for a problem", RunBest},
    {"bench", "", "--template_name=T --config=NAME=v,... [problem]",
     "compile, check and time one config", RunBench},
    {"report", "JOB", "[--output=FILE.html] [--compare=RUN.json]",
     "write the job as one HTML page with plots (prints the file name)",
     RunReport},
    {"export", "", "[--problems=KEY,...|FILE] [problem] [--output=FILE.evtb]",
     "compile the best kernels of problems into one bundle for the runtime "
     "(prints the file name)",
     RunExport},
    {"tune-model", "",
     "--model_config=config.json|--heads=N [--kv_heads=N --head_dim=N "
     "--dtype=bf16] [--max_batch=256] [--max_context=8192] [--budget=10m] "
     "[--output=MODEL.evtb]",
     "tune the buckets that cover a model's serving envelope and export "
     "them as one bundle (run again to resume)",
     RunTuneModel},
    {"model-report", "",
     "--model_config=config.json [the tune-model flags] [--compare=RUN.json] "
     "[--output=FILE.html]",
     "an HTML page of a tune-model run: each bucket's kernel, gain, trials "
     "and time (prints the file name)",
     RunModelReport},
};

std::string Usage() {
  std::string out =
      "evotune: the command-line client of the evotune tuning daemon.\n";
  for (const Command& c : kCommands) {
    const std::string line =
        absl::StrCat("  evotune [flags] ", c.name, *c.args ? " " : "", c.args,
                     *c.flags ? " " : "", c.flags);
    absl::StrAppend(&out, "\n", line, "\n      ", c.summary);
  }
  absl::StrAppend(
      &out,
      "\n\nproblem flags: --batch --heads --kv_heads --seq_q --seq_k "
      "--head_dim --causal --window_left --window_right --softcap --sinks "
      "--dtype "
      "--kv_dtype --q_dtype --layout --page_size "
      "(default: the seed problem B=1 H=8 S=512 D=64 fp16)\nErrors print one "
      "line and exit non-zero. --json prints "
      "JSON.\n\nstrategies (--strategy, --strategy_options=NAME=value,...):\n",
      StrategiesHelp());
  return out;
}

int Main(const std::vector<char*>& argv) {
  if (argv.size() < 2) return Fail(absl::StrCat("missing command\n", Usage()));
  const std::string name = argv[1];
  const Args args(argv.begin() + 2, argv.end());
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    const size_t want = *c.args ? 1 : 0;
    if (args.size() != want) {
      return Fail(args.size() > want
                      ? absl::StrCat("unexpected argument \"", args[want], "\"")
                      : absl::StrCat("usage: evotune ", c.name, " ", c.args));
    }
    absl::StatusOr<std::unique_ptr<Client>> client = Client::FromFlags();
    if (!client.ok()) return Fail(std::string(client.status().message()));
    return c.run(**client, args);
  }
  return Fail(absl::StrCat("unknown command \"", name, "\"\n", Usage()));
}

}  // namespace
}  // namespace evotune

int main(int argc, char** argv) {
  const std::string usage = evotune::Usage();
  if (evotune::HelpRequested(argc, argv)) {
    std::cout << evotune::HelpText(usage);
    return 0;
  }
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const evotune::GrpcLifetime grpc;  // Ends with no gRPC thread left.
  return evotune::Main(args);
}
