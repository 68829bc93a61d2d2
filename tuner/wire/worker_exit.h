// Exit statuses of evotune-worker: part of the contract between the worker
// and the supervisor that restarts it.
#ifndef EVOTUNE_TUNER_WIRE_WORKER_EXIT_H_
#define EVOTUNE_TUNER_WIRE_WORKER_EXIT_H_

namespace evotune {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 2;
// No usable device: restarting will not help.
inline constexpr int kExitNoDevice = 3;
// A trial poisoned the CUDA context.
inline constexpr int kExitContextLost = 4;
// A trial passed its deadline; the process ended itself.
inline constexpr int kExitAborted = 5;
// The daemon refused the worker's token: restarting will not help.
inline constexpr int kExitUnauthenticated = 6;

}  // namespace evotune

#endif  // EVOTUNE_TUNER_WIRE_WORKER_EXIT_H_
