#include "tests/storage/power_cut_vfs.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace evotune {
namespace {

struct State {
  std::mutex mu;
  sqlite3_vfs* real = nullptr;
  sqlite3_vfs vfs{};
  int64_t arm_at = 0;
  int64_t ops = 0;
  bool cut = false;
  // Per path: the durable contents, taken at the first change since the
  // file's last sync (none while every change is synced).
  std::map<std::string, std::optional<std::string>> durable;
};

State& S() {
  static State* state = new State;
  return *state;
}

struct File {
  sqlite3_file base;
  sqlite3_file* real;
  std::string* path;  // Null for temporary files: nothing to keep.
};

File* Of(sqlite3_file* f) { return reinterpret_cast<File*>(f); }

std::string ReadAll(sqlite3_file* real) {
  sqlite3_int64 size = 0;
  real->pMethods->xFileSize(real, &size);
  std::string data(static_cast<size_t>(size), '\0');
  if (size > 0) real->pMethods->xRead(real, data.data(), int(size), 0);
  return data;
}

// Puts every file back as it was at its last sync.
void CutPower() {
  State& s = S();
  s.cut = true;
  for (auto& [path, contents] : s.durable) {
    if (!contents.has_value()) continue;
    const int fd = ::open(path.c_str(), O_WRONLY);
    if (fd < 0) continue;
    if (::ftruncate(fd, static_cast<off_t>(contents->size())) != 0 ||
        ::pwrite(fd, contents->data(), contents->size(), 0) !=
            static_cast<ssize_t>(contents->size())) {
      std::abort();  // The simulation itself failed.
    }
    ::close(fd);
  }
  s.durable.clear();
}

// Before a call that changes f: counts it and cuts power when due (false:
// the call must fail), and keeps the durable contents of f.
bool BeforeChange(File* f) {
  State& s = S();
  if (s.cut) return false;
  ++s.ops;
  if (s.arm_at != 0 && s.ops >= s.arm_at) {
    CutPower();
    return false;
  }
  if (f->path != nullptr) {
    std::optional<std::string>& kept = s.durable[*f->path];
    if (!kept.has_value()) kept = ReadAll(f->real);
  }
  return true;
}

int Close(sqlite3_file* f) {
  File* file = Of(f);
  const int rc = file->real->pMethods->xClose(file->real);
  std::free(file->real);
  delete file->path;
  return rc;
}

int Read(sqlite3_file* f, void* out, int n, sqlite3_int64 offset) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().cut) return SQLITE_IOERR_READ;
  return Of(f)->real->pMethods->xRead(Of(f)->real, out, n, offset);
}

int Write(sqlite3_file* f, const void* in, int n, sqlite3_int64 offset) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (!BeforeChange(Of(f))) return SQLITE_IOERR_WRITE;
  return Of(f)->real->pMethods->xWrite(Of(f)->real, in, n, offset);
}

int Truncate(sqlite3_file* f, sqlite3_int64 size) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (!BeforeChange(Of(f))) return SQLITE_IOERR_TRUNCATE;
  return Of(f)->real->pMethods->xTruncate(Of(f)->real, size);
}

int Sync(sqlite3_file* f, int flags) {
  std::lock_guard<std::mutex> lock(S().mu);
  File* file = Of(f);
  if (!BeforeChange(file)) return SQLITE_IOERR_FSYNC;
  const int rc = file->real->pMethods->xSync(file->real, flags);
  // Everything written to the file, through any handle, is durable now.
  if (rc == SQLITE_OK && file->path != nullptr) S().durable.erase(*file->path);
  return rc;
}

int FileSize(sqlite3_file* f, sqlite3_int64* size) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().cut) return SQLITE_IOERR_FSTAT;
  return Of(f)->real->pMethods->xFileSize(Of(f)->real, size);
}

int FileControl(sqlite3_file* f, int op, void* arg) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().cut) return SQLITE_IOERR;
  File* file = Of(f);
  if (op == SQLITE_FCNTL_SIZE_HINT && file->path != nullptr) {
    // Grows the file: keep what was durable first.
    std::optional<std::string>& kept = S().durable[*file->path];
    if (!kept.has_value()) kept = ReadAll(file->real);
  }
  return file->real->pMethods->xFileControl(file->real, op, arg);
}

// Locks and the WAL index (shared memory, lost anyway in a power cut) pass
// straight through, also after the cut, so that connections can close.
int Lock(sqlite3_file* f, int level) {
  return Of(f)->real->pMethods->xLock(Of(f)->real, level);
}
int Unlock(sqlite3_file* f, int level) {
  return Of(f)->real->pMethods->xUnlock(Of(f)->real, level);
}
int CheckReservedLock(sqlite3_file* f, int* out) {
  return Of(f)->real->pMethods->xCheckReservedLock(Of(f)->real, out);
}
int SectorSize(sqlite3_file* f) {
  return Of(f)->real->pMethods->xSectorSize(Of(f)->real);
}
int DeviceCharacteristics(sqlite3_file* f) {
  return Of(f)->real->pMethods->xDeviceCharacteristics(Of(f)->real);
}
int ShmMap(sqlite3_file* f, int region, int size, int extend,
           void volatile** out) {
  return Of(f)->real->pMethods->xShmMap(Of(f)->real, region, size, extend, out);
}
int ShmLock(sqlite3_file* f, int offset, int n, int flags) {
  return Of(f)->real->pMethods->xShmLock(Of(f)->real, offset, n, flags);
}
void ShmBarrier(sqlite3_file* f) {
  Of(f)->real->pMethods->xShmBarrier(Of(f)->real);
}
int ShmUnmap(sqlite3_file* f, int delete_flag) {
  return Of(f)->real->pMethods->xShmUnmap(Of(f)->real, delete_flag);
}

// Version 2: no memory-mapped I/O (xFetch), so every read and write of the
// database goes through the calls above.
const sqlite3_io_methods kMethods = {2,
                                     Close,
                                     Read,
                                     Write,
                                     Truncate,
                                     Sync,
                                     FileSize,
                                     Lock,
                                     Unlock,
                                     CheckReservedLock,
                                     FileControl,
                                     SectorSize,
                                     DeviceCharacteristics,
                                     ShmMap,
                                     ShmLock,
                                     ShmBarrier,
                                     ShmUnmap,
                                     nullptr,
                                     nullptr};

int Open(sqlite3_vfs*, const char* name, sqlite3_file* f, int flags,
         int* out_flags) {
  State& s = S();
  File* file = Of(f);
  file->base.pMethods = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.cut) return SQLITE_CANTOPEN;
  }
  file->real = static_cast<sqlite3_file*>(std::calloc(1, s.real->szOsFile));
  const int rc = s.real->xOpen(s.real, name, file->real, flags, out_flags);
  if (rc != SQLITE_OK) {
    std::free(file->real);
    return rc;
  }
  file->path = name != nullptr ? new std::string(name) : nullptr;
  file->base.pMethods = &kMethods;
  return SQLITE_OK;
}

int Delete(sqlite3_vfs*, const char* name, int sync_dir) {
  {
    std::lock_guard<std::mutex> lock(S().mu);
    if (S().cut) return SQLITE_IOERR_DELETE;
    S().durable.erase(name);
  }
  return S().real->xDelete(S().real, name, sync_dir);
}
int Access(sqlite3_vfs*, const char* name, int flags, int* out) {
  return S().real->xAccess(S().real, name, flags, out);
}
int FullPathname(sqlite3_vfs*, const char* name, int n, char* out) {
  return S().real->xFullPathname(S().real, name, n, out);
}
void* DlOpen(sqlite3_vfs*, const char* name) {
  return S().real->xDlOpen(S().real, name);
}
void DlError(sqlite3_vfs*, int n, char* out) {
  S().real->xDlError(S().real, n, out);
}
void (*DlSym(sqlite3_vfs*, void* handle, const char* symbol))(void) {
  return S().real->xDlSym(S().real, handle, symbol);
}
void DlClose(sqlite3_vfs*, void* handle) {
  S().real->xDlClose(S().real, handle);
}
int Randomness(sqlite3_vfs*, int n, char* out) {
  return S().real->xRandomness(S().real, n, out);
}
int Sleep(sqlite3_vfs*, int micros) {
  return S().real->xSleep(S().real, micros);
}
int CurrentTime(sqlite3_vfs*, double* out) {
  return S().real->xCurrentTime(S().real, out);
}
int GetLastError(sqlite3_vfs*, int n, char* out) {
  return S().real->xGetLastError(S().real, n, out);
}

}  // namespace

PowerCutVfs::PowerCutVfs() {
  State& s = S();
  s.real = sqlite3_vfs_find(nullptr);
  sqlite3_vfs& v = s.vfs;
  v.iVersion = 1;
  v.szOsFile = sizeof(File);
  v.mxPathname = s.real->mxPathname;
  v.zName = "evotune-power-cut";
  v.xOpen = Open;
  v.xDelete = Delete;
  v.xAccess = Access;
  v.xFullPathname = FullPathname;
  v.xDlOpen = DlOpen;
  v.xDlError = DlError;
  v.xDlSym = DlSym;
  v.xDlClose = DlClose;
  v.xRandomness = Randomness;
  v.xSleep = Sleep;
  v.xCurrentTime = CurrentTime;
  v.xGetLastError = GetLastError;
  sqlite3_vfs_register(&v, 1);
}

PowerCutVfs::~PowerCutVfs() {
  sqlite3_vfs_unregister(&S().vfs);
  sqlite3_vfs_register(S().real, 1);
}

void PowerCutVfs::Arm(int64_t n) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().arm_at = n;
  S().ops = 0;
  S().cut = false;
  S().durable.clear();
}

bool PowerCutVfs::cut() const {
  std::lock_guard<std::mutex> lock(S().mu);
  return S().cut;
}

int64_t PowerCutVfs::operations() const {
  std::lock_guard<std::mutex> lock(S().mu);
  return S().ops;
}

}  // namespace evotune
