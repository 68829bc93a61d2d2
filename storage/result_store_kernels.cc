// ResultStore's cache of kernels compiled for serving (GetKernel).
#include "storage/result_store.h"
#include "storage/store_rows.h"

namespace evotune {

absl::StatusOr<std::optional<CompiledKernel>> ResultStore::FindCompiledKernel(
    const std::string& key) {
  absl::StatusOr<Reader> r = AcquireReader();
  if (!r.ok()) return r.status();
  absl::StatusOr<Statement*> s =
      r->db()->Prepare("SELECT cubin, ptx FROM compiled_kernels WHERE key = ?");
  if (!s.ok()) return s.status();
  ScopedReset reset(*s);
  (*s)->Bind(1, key);
  absl::StatusOr<bool> row = (*s)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::nullopt;
  return CompiledKernel{(*s)->Blob(0), (*s)->Text(1)};
}

absl::Status ResultStore::PutCompiledKernel(const std::string& key,
                                            const CompiledKernel& kernel) {
  absl::MutexLock lock(&writer_mu_);
  absl::StatusOr<Statement*> s = writer_->Prepare(
      "INSERT OR IGNORE INTO compiled_kernels(key, cubin, ptx, created_at) "
      "VALUES(?, ?, ?, ?)");
  if (!s.ok()) return s.status();
  ScopedReset reset(*s);
  (*s)->Bind(1, key)
      .BindBlob(2, kernel.cubin)
      .Bind(3, kernel.ptx)
      .Bind(4, store_rows::NowUnixSeconds());
  return (*s)->Run();
}

}  // namespace evotune
