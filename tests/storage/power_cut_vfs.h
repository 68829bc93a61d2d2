// PowerCutVfs: an SQLite VFS for tests that simulates losing power.
//
// Installed as the default VFS, it passes every call to the VFS it replaces
// and counts the calls that change files (write, truncate, sync). When the
// count reaches the armed cut point, power is lost: every file gets back the
// contents it had at its last sync (writes not yet made durable by xSync are
// dropped, as a power cut drops them from the page cache), the shared-memory
// index of WAL databases is deleted (it lives in memory), and every later
// call on an open file fails with SQLITE_IOERR, so nothing more reaches the
// disk. Opens of files after the cut fail too.
//
// One instance at a time; not thread-safe against itself being armed while
// SQLite runs on other threads, but the calls it wraps may come from any
// thread (they are serialized by a mutex).
#ifndef EVOTUNE_TESTS_STORAGE_POWER_CUT_VFS_H_
#define EVOTUNE_TESTS_STORAGE_POWER_CUT_VFS_H_

#include <cstdint>

namespace evotune {

class PowerCutVfs {
 public:
  // Registers as the default VFS; the destructor restores the previous one.
  PowerCutVfs();
  ~PowerCutVfs();
  PowerCutVfs(const PowerCutVfs&) = delete;
  PowerCutVfs& operator=(const PowerCutVfs&) = delete;

  // Power is lost just before the n-th (1-based) write, truncate or sync
  // from now on; 0 disarms. Forgets an earlier cut and every snapshot.
  void Arm(int64_t n);
  // Whether power was lost.
  bool cut() const;
  // Write, truncate and sync calls since the last Arm.
  int64_t operations() const;
};

}  // namespace evotune

#endif  // EVOTUNE_TESTS_STORAGE_POWER_CUT_VFS_H_
