#include "storage/generation_cache.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace evotune {
namespace {

TEST(GenerationCacheTest, AnswersUntilItsScopeIsWritten) {
  GenerationCache<int> cache(100);
  EXPECT_FALSE(cache.Find("s", "s/a").has_value());
  cache.Put("s", "s/a", cache.Generation("s"), 42);
  cache.Put("t", "t/a", cache.Generation("t"), 7);
  EXPECT_EQ(*cache.Find("s", "s/a"), 42);
  cache.Bump("s");
  EXPECT_FALSE(cache.Find("s", "s/a").has_value());  // Written since.
  EXPECT_EQ(*cache.Find("t", "t/a"), 7);             // Another scope.
  cache.Put("s", "s/a", cache.Generation("s"), 43);  // Read again.
  EXPECT_EQ(*cache.Find("s", "s/a"), 43);
}

TEST(GenerationCacheTest, FindOrReadReadsOncePerGenerationAndKeepsNoError) {
  GenerationCache<int> cache(100);
  int reads = 0;
  auto read = [&]() -> absl::StatusOr<int> { return ++reads; };
  EXPECT_EQ(*cache.FindOrRead("s", "s/a", read), 1);
  EXPECT_EQ(*cache.FindOrRead("s", "s/a", read), 1);
  cache.Bump("s");
  EXPECT_EQ(*cache.FindOrRead("s", "s/a", read), 2);
  auto fail = []() -> absl::StatusOr<int> {
    return absl::UnavailableError("busy");
  };
  EXPECT_FALSE(cache.FindOrRead("s", "s/b", fail).ok());
  EXPECT_EQ(*cache.FindOrRead("s", "s/b", read), 3);  // Not kept: read again.
}

// A read that blocks until released, counting its calls; each returns its
// call's number.
struct BlockingRead {
  std::atomic<int> reads{0};
  absl::Notification entered, release;
  absl::StatusOr<int> operator()() {
    const int n = ++reads;
    if (n == 1) entered.Notify();
    release.WaitForNotification();
    return n;
  }
};

TEST(GenerationCacheTest, MissesOfOneKeyAtTheSameTimeShareOneRead) {
  GenerationCache<int> cache(100);
  BlockingRead read;
  std::vector<int> got(8);
  std::vector<std::thread> threads;
  auto ask = [&](int i) {
    got[i] = *cache.FindOrRead("s", "s/a", [&] { return read(); });
  };
  threads.emplace_back(ask, 0);
  read.entered.WaitForNotification();  // The first read is under way.
  for (int i = 1; i < 8; ++i) threads.emplace_back(ask, i);
  absl::SleepFor(absl::Milliseconds(50));  // Let the others miss too.
  read.release.Notify();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(read.reads, 1);
  for (int v : got) EXPECT_EQ(v, 1);
}

TEST(GenerationCacheTest, AWaiterAfterAWriteReadsForItself) {
  GenerationCache<int> cache(100);
  BlockingRead read;
  int first = 0, second = 0;
  std::thread a(
      [&] { first = *cache.FindOrRead("s", "s/a", [&] { return read(); }); });
  read.entered.WaitForNotification();
  cache.Bump("s");  // A write commits while the first read runs.
  std::thread b(
      [&] { second = *cache.FindOrRead("s", "s/a", [&] { return read(); }); });
  absl::SleepFor(absl::Milliseconds(50));
  read.release.Notify();
  a.join();
  b.join();
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 2);  // Its own read, after the write.
  EXPECT_EQ(*cache.Find("s", "s/a"), 2);
}

TEST(GenerationCacheTest, AnAnswerReadAcrossAWriteIsNeverServed) {
  GenerationCache<int> cache(100);
  const uint64_t before = cache.Generation("s");  // The read starts...
  cache.Bump("s");                                // ...a write commits...
  cache.Put("s", "s/a", before, 1);               // ...the read ends.
  EXPECT_FALSE(cache.Find("s", "s/a").has_value());
}

TEST(GenerationCacheTest, GenerationsAreNeverSeenTwice) {
  GenerationCache<int> cache(16);
  const uint64_t before = cache.Generation("s");
  cache.Bump("s");
  // Many more scopes than the cache holds answers of: answers are dropped,
  // generations are not, so `before` stays stale.
  for (int i = 0; i < 1000; ++i) {
    const std::string scope = "x" + std::to_string(i);
    cache.Put(scope, scope, cache.Generation(scope), i);
    cache.Bump(scope);
  }
  cache.Put("s", "s/a", before, 1);
  EXPECT_FALSE(cache.Find("s", "s/a").has_value());
}

TEST(GenerationCacheTest, StaysBoundedAndKeepsTheNewest) {
  GenerationCache<int> cache(64);
  for (int i = 0; i < 10000; ++i) {
    const std::string scope = "k" + std::to_string(i);
    cache.Put(scope, scope, cache.Generation(scope), i);
    EXPECT_EQ(*cache.Find(scope, scope), i);
  }
  // 16 shards of at most 64 / 16 + 1 answers.
  EXPECT_LE(cache.size(), 16u * 5);
  EXPECT_GT(cache.size(), 0u);
}

TEST(GenerationCacheTest, BoundedByTheWeightOfItsAnswers) {
  GenerationCache<std::vector<int>> cache(
      160, [](const std::vector<int>& v) { return v.size(); });
  for (int i = 0; i < 1000; ++i) {
    const std::string scope = "k" + std::to_string(i);
    cache.Put(scope, scope, cache.Generation(scope), std::vector<int>(5, i));
    EXPECT_EQ(cache.Find(scope, scope)->front(), i);
  }
  // 16 shards of at most 160 / 16 + 1 = 11 ints: two answers each.
  EXPECT_LE(cache.size(), 16u * 2);
  // Replacing an answer does not count it twice.
  GenerationCache<std::vector<int>> one(
      16, [](const std::vector<int>& v) { return v.size(); });
  for (int i = 0; i < 100; ++i) {
    one.Put("s", "s/a", one.Generation("s"), std::vector<int>(1, i));
    one.Put("s", "s/b", one.Generation("s"), std::vector<int>(1, i));
  }
  EXPECT_EQ(one.size(), 2u);
  EXPECT_EQ(one.Find("s", "s/a")->front(), 99);
}

TEST(GenerationCacheTest, ConcurrentReadersAndWritersSeeWholeAnswers) {
  GenerationCache<std::vector<int>> cache(1000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&cache, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::string scope = "s" + std::to_string(i % 7);
        const std::string key = scope + "/" + std::to_string(i % 50);
        if ((i + t) % 5 == 0) {
          cache.Bump(scope);
        } else if ((i + t) % 3 == 0) {
          cache.Put(scope, key, cache.Generation(scope),
                    std::vector<int>(i % 50 + 1, i % 50));
        } else if (auto v = cache.Find(scope, key)) {
          ASSERT_EQ(v->size(), static_cast<size_t>(i % 50 + 1));
          for (int x : *v) ASSERT_EQ(x, i % 50);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace
}  // namespace evotune
