// Hostile input on an open port. Every method of both of evotuned's services
// (found in their descriptors, so a method added later is covered) gets
// random bytes, random well-typed messages, their truncations and bit flips,
// a message nested past protobuf's depth limit and one past the server's
// size limit, through the generic gRPC API. Then hundreds of WatchJob
// streams whose clients vanish mid-stream. The server stays up, answers
// well-formed calls correctly afterwards, and a refused call writes nothing.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/message.h>
#include <grpcpp/generic/generic_stub.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <random>
#include <thread>

#include "evotune/v1/evotune.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/daemon/synthetic_tuner.h"
#include "tuner/daemon/grpc_service.h"
#include "tuner/daemon/server.h"
#include "tuner/daemon/worker_service.h"
#include "tuner/serving/kernel_service.h"
#include "tuner/wire/message_convert.h"

namespace evotune {
namespace {

namespace pb = google::protobuf;
using Rng = std::mt19937_64;

const pb::ServiceDescriptor* Service(const std::string& name) {
  return pb::DescriptorPool::generated_pool()->FindServiceByName(name);
}

// --- Random requests.

std::string RandomBytes(Rng& rng, size_t max_len) {
  std::string s(rng() % (max_len + 1), '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Valid UTF-8: names the services know, ids of the right shape, and noise.
std::string RandomText(Rng& rng) {
  static const char* const kKnown[] = {"",
                                       "naive",
                                       "flash_fwd_tma",
                                       "j000000000001",
                                       "NVIDIA H100",
                                       "fp16",
                                       "KV_TILE=32,WARPS=2",
                                       "w-1",
                                       "../../etc/passwd"};
  switch (rng() % 3) {
    case 0:
      return kKnown[rng() % std::size(kKnown)];
    case 1: {
      std::string s(rng() % 40, 'a');
      for (char& c : s) c = static_cast<char>(' ' + rng() % 95);
      return s;
    }
    default:
      return std::string(rng() % 3 == 0 ? 100000 : 300, 'x');
  }
}

int64_t RandomInt(Rng& rng) {
  static const int64_t kEdges[] = {0,         1,         -1,        2,
                                   7,         64,        512,       1 << 20,
                                   INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN};
  return rng() % 2 ? kEdges[rng() % std::size(kEdges)]
                   : static_cast<int64_t>(rng());
}

double RandomDouble(Rng& rng) {
  static const double kEdges[] = {0,   -1,       1e300,     -1e-300,
                                  NAN, INFINITY, -INFINITY, 7.5};
  return kEdges[rng() % std::size(kEdges)];
}

void FillRandom(pb::Message* m, Rng& rng, int depth);

void AddRandomField(pb::Message* m, const pb::FieldDescriptor* f, Rng& rng,
                    int depth) {
  const pb::Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
    case pb::FieldDescriptor::CPPTYPE_UINT32: {
      const auto v = static_cast<uint32_t>(RandomInt(rng));
      if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_INT32) {
        rep ? r->AddInt32(m, f, v) : r->SetInt32(m, f, v);
      } else {
        rep ? r->AddUInt32(m, f, v) : r->SetUInt32(m, f, v);
      }
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_INT64:
      rep ? r->AddInt64(m, f, RandomInt(rng))
          : r->SetInt64(m, f, RandomInt(rng));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      rep ? r->AddUInt64(m, f, RandomInt(rng))
          : r->SetUInt64(m, f, RandomInt(rng));
      break;
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      rep ? r->AddDouble(m, f, RandomDouble(rng))
          : r->SetDouble(m, f, RandomDouble(rng));
      break;
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      rep ? r->AddFloat(m, f, RandomDouble(rng))
          : r->SetFloat(m, f, RandomDouble(rng));
      break;
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      rep ? r->AddBool(m, f, rng() % 2) : r->SetBool(m, f, rng() % 2);
      break;
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      // Values beyond the enum's too (proto3 keeps them).
      const int v = rng() % 2 ? static_cast<int>(rng() % 5)
                              : static_cast<int>(RandomInt(rng));
      rep ? r->AddEnumValue(m, f, v) : r->SetEnumValue(m, f, v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_STRING:
      rep ? r->AddString(m, f, RandomText(rng))
          : r->SetString(m, f, RandomText(rng));
      break;
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      if (depth < 4) {
        FillRandom(rep ? r->AddMessage(m, f) : r->MutableMessage(m, f), rng,
                   depth + 1);
      }
      break;
  }
}

// Sets a random subset of `m`'s fields to random values of their types.
void FillRandom(pb::Message* m, Rng& rng, int depth) {
  const pb::Descriptor* d = m->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (rng() % 3 == 0) continue;
    const int n = f->is_repeated() ? static_cast<int>(rng() % 4) : 1;
    for (int k = 0; k < n; ++k) AddRandomField(m, f, rng, depth);
  }
}

// Field 1 as a length-delimited submessage, `depth` times.
std::string Nested(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) {
    std::string outer("\x0a", 1);
    uint64_t n = s.size();
    do {
      outer.push_back(static_cast<char>((n & 0x7f) | (n > 0x7f ? 0x80 : 0)));
      n >>= 7;
    } while (n != 0);
    s = outer + s;
  }
  return s;
}

// `count` hostile request payloads for a method taking `input`.
std::vector<std::string> HostilePayloads(const pb::Descriptor* input, Rng& rng,
                                         int count) {
  pb::DynamicMessageFactory factory;
  std::vector<std::string> out = {
      "",
      std::string("\x0a\xff\xff\xff\xff\x0f", 6),  // A length past the end.
      std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11),
      std::string("\x0b\x0c", 2),  // Group tags.
      Nested(200),                 // Past the parser's recursion limit.
  };
  while (static_cast<int>(out.size()) < count) {
    std::unique_ptr<pb::Message> m(factory.GetPrototype(input)->New());
    FillRandom(m.get(), rng, 0);
    std::string wire = m->SerializeAsString();
    switch (rng() % 4) {
      case 0:  // Well-typed.
        break;
      case 1:  // Truncated.
        wire.resize(wire.empty() ? 0 : rng() % wire.size());
        break;
      case 2:  // Bit flips.
        for (int i = 0; !wire.empty() && i < 1 + static_cast<int>(rng() % 4);
             ++i) {
          wire[rng() % wire.size()] ^= static_cast<char>(1 << (rng() % 8));
        }
        break;
      default:
        wire = RandomBytes(rng, 256);
    }
    out.push_back(std::move(wire));
  }
  return out;
}

// --- The daemon under test.

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("hostile_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    SyntheticEvaluator::Options slow;
    slow.delay = absl::Milliseconds(5);
    tuning_ = std::make_unique<SyntheticTuner>(dir_, slow);
    kernels_ = std::make_unique<KernelService>(&tuning_->service,
                                               tuning_->store.get());
    tuner_ = std::make_unique<GrpcTuner>(&tuning_->service, AccessTokens{},
                                         kernels_.get());
    pool_ = std::make_unique<WorkerPool>(WorkerPool::Options{});
    workers_ = std::make_unique<GrpcWorkerPool>(pool_.get(), AccessTokens{});
    absl::StatusOr<BuiltServer> built =
        BuildServer("127.0.0.1:0", {tuner_.get(), workers_.get()});
    ASSERT_TRUE(built.ok()) << built.status();
    server_ = std::move(built->server);
    address_ = absl::StrCat("127.0.0.1:", built->port);
    channel_ = NewChannel(0);
    ASSERT_TRUE(tuning_->jobs.Start().ok());
  }
  void TearDown() override {
    server_->Shutdown();
    tuning_->jobs.Shutdown();
    pool_->Close();
    std::filesystem::remove_all(dir_);
  }

  // A channel of its own connection (channels with equal arguments share).
  std::shared_ptr<grpc::Channel> NewChannel(int n) {
    grpc::ChannelArguments args;
    args.SetInt("evotune.test_connection", n);
    args.SetMaxSendMessageSize(64 << 20);
    return grpc::CreateCustomChannel(address_,
                                     grpc::InsecureChannelCredentials(), args);
  }

  grpc::Status Call(const std::string& method, const std::string& payload) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    grpc::Slice slice(payload);
    grpc::ByteBuffer request(&slice, 1), response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  }

  // What a refused call must leave as it was.
  struct Written {
    size_t jobs = 0;
    int64_t trials = 0;
    int workers = 0;
    bool operator==(const Written& o) const {
      return jobs == o.jobs && trials == o.trials && workers == o.workers;
    }
  };
  Written Snapshot() {
    return {tuning_->store->ListJobs(std::nullopt).value().size(),
            tuning_->store->CountTrials().value(), pool_->workers()};
  }

  // A well-formed search through the generated stub, run to its end.
  std::string SubmitSeed(int trials) {
    v1::SubmitSearchRequest r;
    r.set_template_name("flash_fwd");
    Problem seed;  // B=1 H=8 S=512 D=64 fp16.
    seed.heads = seed.kv_heads = 8;
    seed.seq_q = seed.seq_k = 512;
    *r.mutable_problem() = ProblemToProto(seed);
    r.mutable_budget()->set_max_trials(trials);
    r.mutable_budget()->set_max_seconds(600);
    r.set_strategy("exhaustive");
    grpc::ClientContext ctx;
    v1::SubmitSearchResponse resp;
    grpc::Status s = v1::Tuner::NewStub(channel_)->SubmitSearch(&ctx, r, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }

  // Every update of a job's stream, read to its end.
  std::vector<v1::JobUpdate> WatchAll(const std::string& job_id) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(60));
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    auto reader = v1::Tuner::NewStub(channel_)->WatchJob(&ctx, req);
    std::vector<v1::JobUpdate> out;
    v1::JobUpdate u;
    while (reader->Read(&u)) out.push_back(u);
    EXPECT_TRUE(reader->Finish().ok());
    return out;
  }

  // Asserts the server answers well-formed calls correctly.
  void ExpectServesWellFormedCalls(int trials) {
    grpc::ClientContext ctx;
    v1::ListTemplatesResponse templates;
    ASSERT_TRUE(
        v1::Tuner::NewStub(channel_)->ListTemplates(&ctx, {}, &templates).ok());
    EXPECT_GE(templates.templates_size(), 3);
    const std::string job = SubmitSeed(trials);
    const std::vector<v1::JobUpdate> updates = WatchAll(job);
    ASSERT_FALSE(updates.empty());
    EXPECT_EQ(updates.back().job().state(), v1::JOB_STATE_SUCCEEDED);
    EXPECT_EQ(updates.back().job().trials_done(), trials);
  }

  std::filesystem::path dir_;
  std::unique_ptr<SyntheticTuner> tuning_;
  std::unique_ptr<KernelService> kernels_;
  std::unique_ptr<GrpcTuner> tuner_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<GrpcWorkerPool> workers_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
};

// A status the server may give hostile input: its own refusals, or gRPC's
// INTERNAL for a request that does not parse. Never UNKNOWN (an escaped
// exception) nor an INTERNAL of the service's own.
bool Acceptable(const grpc::Status& s, bool parses) {
  switch (s.error_code()) {
    case grpc::OK:
    case grpc::INVALID_ARGUMENT:
    case grpc::NOT_FOUND:
    case grpc::FAILED_PRECONDITION:
    case grpc::OUT_OF_RANGE:
    case grpc::RESOURCE_EXHAUSTED:
    case grpc::UNAVAILABLE:  // A worker call the pool cannot take now.
      return true;
    case grpc::INTERNAL:
      return !parses;
    default:
      return false;
  }
}

bool Parses(const pb::Descriptor* type, const std::string& payload) {
  pb::DynamicMessageFactory factory;
  std::unique_ptr<pb::Message> m(factory.GetPrototype(type)->New());
  return m->ParseFromString(payload);
}

TEST_F(HostileInputTest, EveryMethodSurvivesGarbage) {
  // A fixed seed; EVOTUNE_HOSTILE_SEED explores others.
  const char* seed = std::getenv("EVOTUNE_HOSTILE_SEED");
  Rng rng(seed != nullptr ? std::strtoull(seed, nullptr, 10) : 20261124);
  // Invalid UTF-8 in string fields is logged by every parse; expected here.
  pb::LogSilencer quiet;
  int calls = 0, refused = 0;
  for (const char* name : {"evotune.v1.Tuner", "evotune.v1.WorkerPool"}) {
    const pb::ServiceDescriptor* service = Service(name);
    ASSERT_NE(service, nullptr) << name;
    for (int i = 0; i < service->method_count(); ++i) {
      const pb::MethodDescriptor* m = service->method(i);
      const std::string path = absl::StrCat("/", name, "/", m->name());
      for (const std::string& payload :
           HostilePayloads(m->input_type(), rng, 400)) {
        const Written before = Snapshot();
        const grpc::Status s = Call(path, payload);
        ++calls;
        ASSERT_TRUE(Acceptable(s, Parses(m->input_type(), payload)))
            << path << " answered " << s.error_code() << " "
            << s.error_message() << " to " << payload.size() << " bytes";
        if (!s.ok()) {
          ++refused;
          EXPECT_EQ(Snapshot(), before) << path << ": " << s.error_message();
        }
      }
    }
  }
  EXPECT_GT(refused, calls / 2);  // The input really was hostile.
  // An unknown method, and the server is still whole.
  EXPECT_EQ(Call("/evotune.v1.Tuner/DropTables", "").error_code(),
            grpc::UNIMPLEMENTED);
  ExpectServesWellFormedCalls(6);
}

TEST_F(HostileInputTest, OversizedMessagesAreRefusedWithoutHarm) {
  const std::string huge(kMaxRequestBytes + 1, 'x');
  for (const char* method :
       {"/evotune.v1.Tuner/SubmitSearch", "/evotune.v1.Tuner/QueryBest",
        "/evotune.v1.WorkerPool/CompleteTrial"}) {
    EXPECT_EQ(Call(method, huge).error_code(), grpc::RESOURCE_EXHAUSTED)
        << method;
  }
  // Just inside the limit: a search whose template name is megabytes long.
  v1::SubmitSearchRequest big;
  big.set_template_name(std::string(kMaxRequestBytes - 64, 'n'));
  grpc::Status s =
      Call("/evotune.v1.Tuner/SubmitSearch", big.SerializeAsString());
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT) << s.error_message();
  EXPECT_LT(s.error_message().size(), 1000u);  // Not echoed back whole.
  // A worker whose name would flood the log.
  v1::RegisterWorkerRequest worker;
  worker.set_name(std::string(100000, 'w'));
  worker.mutable_device()->mutable_device()->set_name("NVIDIA H100");
  s = Call("/evotune.v1.WorkerPool/RegisterWorker", worker.SerializeAsString());
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "name: at most 128 characters, got 100000");
  worker.set_name("host:gpu0\n2026 I job forged");
  s = Call("/evotune.v1.WorkerPool/RegisterWorker", worker.SerializeAsString());
  EXPECT_EQ(s.error_message(), "name: printable ASCII without spaces only");
  // A compute capability whose arithmetic would overflow.
  worker.set_name("host:gpu0");
  worker.mutable_device()->mutable_device()->set_cc_major(4000000000u);
  s = Call("/evotune.v1.WorkerPool/RegisterWorker", worker.SerializeAsString());
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "device.device: compute capability 4000000000.0 is not one");
  EXPECT_EQ(Snapshot(), Written{});
  ExpectServesWellFormedCalls(4);
}

int Threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/self/task")) {
    ++n;
  }
  return n;
}

TEST_F(HostileInputTest, WatchersVanishingMidStream) {
  const std::string job = SubmitSeed(60);
  const int threads_before = Threads();
  constexpr int kChannels = 16, kStreams = 240;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int c = 0; c < kChannels; ++c) channels.push_back(NewChannel(c + 1));
  std::atomic<int> complete{0}, started{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      grpc::ClientContext ctx;
      // A third give up at a deadline, a third cancel after two updates, a
      // third read the job to its end.
      if (i % 3 == 0) {
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(50 + i));
      }
      v1::WatchJobRequest req;
      req.set_job_id(job);
      auto stub = v1::Tuner::NewStub(channels[i % kChannels]);
      auto reader = stub->WatchJob(&ctx, req);
      v1::JobUpdate u;
      int read = 0;
      while (reader->Read(&u)) {
        if (++read == 1) ++started;
        if (i % 3 == 1 && read == 2) ctx.TryCancel();
      }
      // The readers to the end get the whole job (a deadline may or may not
      // come before the job's end).
      if (reader->Finish().ok() && i % 3 == 2 &&
          u.job().state() == v1::JOB_STATE_SUCCEEDED) {
        ++complete;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_GE(started.load(), kStreams * 2 / 3);
  EXPECT_EQ(complete.load(), kStreams / 3);
  channels.clear();

  // The server's handlers of the vanished streams return: its threads go
  // back to about what they were.
  int threads = Threads();
  for (int i = 0; i < 100 && threads > threads_before + 16; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    threads = Threads();
  }
  EXPECT_LE(threads, threads_before + 16);
  // The job lost nothing, and a new watcher sees every trial.
  const std::vector<v1::JobUpdate> updates = WatchAll(job);
  ASSERT_FALSE(updates.empty());
  EXPECT_EQ(updates.back().job().state(), v1::JOB_STATE_SUCCEEDED);
  int events = 0;
  for (const v1::JobUpdate& u : updates) events += u.has_event();
  EXPECT_EQ(events, 60);
  EXPECT_EQ(*tuning_->store->CountTrials(), 60);
  ExpectServesWellFormedCalls(5);
}

}  // namespace
}  // namespace evotune
