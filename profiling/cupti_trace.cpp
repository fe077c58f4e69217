#include "profiling/cupti_trace.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#ifdef LENET_HAVE_CUPTI
#include <cupti.h>
#endif

namespace lenet::profiling {

#ifdef LENET_HAVE_CUPTI
namespace {

std::mutex g_mutex;
Activity g_activity;  // filled by CUPTI's buffer-completed callback, possibly on its own thread
// Correlation ids: kernel -> its launch (runtime or driver API record) -> when that call started.
std::vector<std::pair<uint32_t, LaunchedKernel>> g_kernel_correlation;
std::unordered_map<uint32_t, uint64_t> g_api_start;

void check(CUptiResult rc, const char* call) {
  if (rc == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(rc, &text);
  throw std::runtime_error(std::string(call) + " failed: " + (text ? text : "unknown CUPTI error"));
}

constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr size_t kAlign = 8;  // CUPTI requires 8-byte aligned activity buffers

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

// CUPTI may hand over a kernel record with 0 timestamps (no device memory to time it, says cupti_activity.h)
// or, from a forced flush, one not complete: such a record's times are left out, counted, instead of a
// duration wrapped around 2^64.
bool timed(uint64_t start, uint64_t end, Activity& a) {
  if (start != 0 && end > start) return true;
  ++a.untimed_records;
  return false;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mutex);
  CUpti_Activity* record = nullptr;
  CUptiResult rc;
  while ((rc = cuptiActivityGetNextRecord(buffer, valid, &record)) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        if (k->graphId == 0) ++g_activity.host_launched_kernels;
        if (!timed(k->start, k->end, g_activity)) break;
        g_activity.kernels.push_back({k->start, k->end, k->deviceId});
        g_kernel_correlation.push_back(
            {k->correlationId, {{k->start, k->end, k->deviceId}, 0, k->graphId, k->graphNodeId}});
        if (k->name != nullptr && std::strstr(k->name, "add_into_kernel") != nullptr)
          g_activity.allreduce.push_back({k->start, k->end, k->deviceId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        const bool device_to_device =
            m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD || m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
        if (device_to_device && timed(m->start, m->end, g_activity))
          g_activity.allreduce.push_back({m->start, m->end, m->deviceId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY2: {  // peer-to-peer copies between devices
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(record);
        if (timed(m->start, m->end, g_activity)) g_activity.allreduce.push_back({m->start, m->end, m->deviceId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto* api = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        g_api_start[api->correlationId] = api->start;
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME: {
        const auto* api = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        g_api_start[api->correlationId] = api->start;
        if (api->cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000 ||
            api->cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000)
          ++g_activity.graph_launches;
        break;
      }
      default:
        break;
    }
  }
  // MAX_LIMIT_REACHED is the end of the records; INVALID_KIND (a record incomplete or invalid) loses the
  // rest of this buffer.
  if (rc != CUPTI_ERROR_MAX_LIMIT_REACHED) ++g_activity.unread_buffers;
  std::free(buffer);
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_RUNTIME,
                                         CUPTI_ACTIVITY_KIND_DRIVER};

// Disables every kind, even past a failure; returns the first failure.
CUptiResult disable_all() {
  CUptiResult first = CUPTI_SUCCESS;
  for (CUpti_ActivityKind kind : kKinds) {
    const CUptiResult rc = cuptiActivityDisable(kind);
    if (first == CUPTI_SUCCESS) first = rc;
  }
  return first;
}

void CUPTIAPI no_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

}  // namespace

bool CuptiTrace::available() { return true; }

std::string CuptiTrace::unavailable_reason() { return ""; }

void CuptiTrace::prepare() {
  static std::once_flag registered;
  static CUpti_SubscriberHandle subscriber = nullptr;  // kept for the process, as the buffers are
  std::call_once(registered, [] {
    // Every CUPTI client subscribes first (cupti_callbacks.h): that is what finds a tool already holding
    // CUPTI, whose buffers registering ours would take over. After a throw call_once runs this again: a
    // subscription made then is kept.
    if (subscriber == nullptr) {
      const CUptiResult rc = cuptiSubscribe(&subscriber, no_callback, nullptr);
      if (rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED || rc == CUPTI_ERROR_MAX_LIMIT_REACHED)
        throw std::runtime_error("another tool holds CUPTI (Nsight Systems, Nsight Compute or compute-sanitizer "
                                 "attached?); --no-trace leaves it to that tool");
      check(rc, "cuptiSubscribe");
    }
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  });
}

void CuptiTrace::start() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_activity = Activity{};
    g_kernel_correlation.clear();
    g_api_start.clear();
  }
  prepare();
  try {
    for (CUpti_ActivityKind kind : kKinds) check(cuptiActivityEnable(kind), "cuptiActivityEnable");
  } catch (...) {
    disable_all();
    throw;
  }
}

Activity CuptiTrace::stop() {
  // Every kind is disabled even when the flush fails: nothing after this may be traced.
  const CUptiResult flushed = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const CUptiResult disabled = disable_all();
  check(flushed, "cuptiActivityFlushAll");
  check(disabled, "cuptiActivityDisable");
  size_t dropped = 0;
  check(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped), "cuptiActivityGetNumDroppedRecords");
  std::lock_guard<std::mutex> lock(g_mutex);
  g_activity.dropped_records = dropped;
  JoinedLaunches joined = join_launches(g_kernel_correlation, g_api_start);
  g_activity.launched = std::move(joined.launched);
  g_activity.unplaced_kernels = joined.unplaced;
  return std::move(g_activity);
}

uint64_t CuptiTrace::now() {
  uint64_t t = 0;
  check(cuptiGetTimestamp(&t), "cuptiGetTimestamp");
  return t;
}

#else

bool CuptiTrace::available() { return false; }
std::string CuptiTrace::unavailable_reason() { return "this build found no CUPTI"; }
void CuptiTrace::prepare() {}
void CuptiTrace::start() { throw std::runtime_error(unavailable_reason()); }
Activity CuptiTrace::stop() { return {}; }
uint64_t CuptiTrace::now() { return 0; }

#endif

}  // namespace lenet::profiling
