// GenerationCache: answers read from the store, kept until what they were
// read from changes.
//
// Answers belong to a scope (e.g. one problem on one device); a committed
// write to the scope bumps its generation (Bump), and an answer is returned
// only while its scope is still at the generation it was read at. Readers
// take the generation before they read (Generation) and keep the answer
// with it (Put), so a write that commits during the read makes the answer
// stale at once. Generations are drawn from one counter and never reused.
// Sharded by scope, so that concurrent queries rarely share a lock; bounded:
// a shard whose answers fill up drops them (scopes are kept, so that no
// generation is ever seen twice). Thread-safe.
//
// `weigh` gives an answer's weight (e.g. its rows); the answers kept weigh
// about `max_weight` at most.
#ifndef EVOTUNE_STORAGE_GENERATION_CACHE_H_
#define EVOTUNE_STORAGE_GENERATION_CACHE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace evotune {

template <typename V>
class GenerationCache {
 public:
  explicit GenerationCache(
      size_t max_weight,
      size_t (*weigh)(const V&) = [](const V&) { return size_t{1}; })
      : per_shard_(max_weight / kShards + 1), weigh_(weigh) {}
  GenerationCache(const GenerationCache&) = delete;
  GenerationCache& operator=(const GenerationCache&) = delete;

  // The scope's generation now: 0 until its first Bump.
  uint64_t Generation(const std::string& scope) const {
    const Shard& s = ShardOf(scope);
    absl::MutexLock lock(&s.mu);
    return GenerationLocked(s, scope);
  }

  // The answer kept for `key` of `scope`, unless the scope changed since it
  // was read.
  std::optional<V> Find(const std::string& scope,
                        const std::string& key) const {
    const Shard& s = ShardOf(scope);
    absl::MutexLock lock(&s.mu);
    auto it = s.answers.find(key);
    if (it == s.answers.end() ||
        it->second.first != GenerationLocked(s, scope)) {
      return std::nullopt;
    }
    return it->second.second;
  }

  // Keeps `value` for `key` of `scope`, read at `generation`.
  void Put(const std::string& scope, const std::string& key,
           uint64_t generation, V value) {
    Shard& s = ShardOf(scope);
    const size_t weight = weigh_(value);
    absl::MutexLock lock(&s.mu);
    auto it = s.answers.find(key);
    if (it != s.answers.end()) {
      s.weight -= weigh_(it->second.second);
      s.answers.erase(it);
    }
    if (s.weight + weight > per_shard_) {
      s.answers.clear();  // Rare; the next queries read again.
      s.weight = 0;
    }
    s.weight += weight;
    s.answers[key] = {generation, std::move(value)};
  }

  // The answer kept for `key` of `scope`, or else `read()`'s (a
  // absl::StatusOr<V>), kept when OK. Callers that miss one key at the same
  // time share one read: the first reads, the others wait for its answer (a
  // read that takes milliseconds, asked by many queries at once, runs once).
  // A waiter reads for itself when that read failed or when the scope was
  // written between its start and the waiter's arrival.
  template <typename Read>
  auto FindOrRead(const std::string& scope, const std::string& key, Read read)
      -> decltype(read()) {
    if (std::optional<V> kept = Find(scope, key)) return *std::move(kept);
    const uint64_t generation = Generation(scope);
    bool first = false;
    std::shared_ptr<Flight> flight = Join(scope, key, generation, &first);
    if (!first) {
      flight->done.WaitForNotification();
      if (flight->value && flight->generation == generation) {
        return *flight->value;
      }
      auto value = read();
      if (value.ok()) Put(scope, key, generation, *value);
      return value;
    }
    auto value = read();
    if (value.ok()) {
      Put(scope, key, generation, *value);
      flight->value = *value;
    }
    Land(scope, key, flight);
    return value;
  }

  // After a committed write to `scope`: its answers are stale.
  void Bump(const std::string& scope) {
    Shard& s = ShardOf(scope);
    const uint64_t next = next_.fetch_add(1, std::memory_order_relaxed) + 1;
    absl::MutexLock lock(&s.mu);
    s.generations[scope] = next;
  }

  // Answers kept, stale ones included.
  size_t size() const {
    size_t n = 0;
    for (const Shard& s : shards_) {
      absl::MutexLock lock(&s.mu);
      n += s.answers.size();
    }
    return n;
  }

 private:
  static constexpr size_t kShards = 16;
  // A read under way, and its answer once done (none when it failed).
  struct Flight {
    uint64_t generation = 0;
    std::optional<V> value;
    absl::Notification done;
  };
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, uint64_t> generations ABSL_GUARDED_BY(mu);
    absl::flat_hash_map<std::string, std::pair<uint64_t, V>> answers
        ABSL_GUARDED_BY(mu);
    absl::flat_hash_map<std::string, std::shared_ptr<Flight>> flights
        ABSL_GUARDED_BY(mu);
    size_t weight ABSL_GUARDED_BY(mu) = 0;
  };
  // The read of `key` under way, or a new one that the caller (*first) makes.
  std::shared_ptr<Flight> Join(const std::string& scope, const std::string& key,
                               uint64_t generation, bool* first) {
    Shard& s = ShardOf(scope);
    absl::MutexLock lock(&s.mu);
    std::shared_ptr<Flight>& f = s.flights[key];
    *first = f == nullptr;
    if (*first) {
      f = std::make_shared<Flight>();
      f->generation = generation;
    }
    return f;
  }
  // The read is done: later misses start their own, waiters get its answer.
  void Land(const std::string& scope, const std::string& key,
            const std::shared_ptr<Flight>& flight) {
    Shard& s = ShardOf(scope);
    {
      absl::MutexLock lock(&s.mu);
      s.flights.erase(key);
    }
    flight->done.Notify();
  }
  static uint64_t GenerationLocked(const Shard& s, const std::string& scope)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    auto it = s.generations.find(scope);
    return it == s.generations.end() ? 0 : it->second;
  }
  Shard& ShardOf(const std::string& scope) {
    return shards_[std::hash<std::string>()(scope) % kShards];
  }
  const Shard& ShardOf(const std::string& scope) const {
    return shards_[std::hash<std::string>()(scope) % kShards];
  }

  const size_t per_shard_;
  size_t (*const weigh_)(const V&);
  std::atomic<uint64_t> next_{0};
  std::array<Shard, kShards> shards_;
};

}  // namespace evotune

#endif  // EVOTUNE_STORAGE_GENERATION_CACHE_H_
