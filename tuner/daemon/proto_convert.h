// Conversions between evotune.v1 messages and internal types: the one place
// where the daemon's logic meets protobuf and gRPC types.
#ifndef EVOTUNE_TUNER_DAEMON_PROTO_CONVERT_H_
#define EVOTUNE_TUNER_DAEMON_PROTO_CONVERT_H_

#include <grpcpp/support/status.h>

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "evotune/v1/evotune.pb.h"
#include "tuner/serving/kernel_service.h"
#include "tuner/serving/tuning_service.h"
#include "tuner/wire/message_convert.h"

namespace evotune {

v1::Trial TrialToProto(const StoredTrial& t);
v1::Job JobToProto(const JobView& view);
v1::TemplateInfo TemplateToProto(const KernelTemplate& t);
v1::QueryBestResponse BestToProto(const BestAnswer& answer);

absl::StatusOr<SearchRequest> SearchFromProto(const v1::SubmitSearchRequest& r);
absl::StatusOr<BestQuery> BestQueryFromProto(const v1::QueryBestRequest& r);
absl::StatusOr<EvaluateRequest> EvaluateFromProto(
    const v1::EvaluateConfigRequest& r);
v1::EvaluateConfigResponse EvaluateToProto(const EvaluateAnswer& answer);
// A GetKernel request as the query it answers (k = 1).
absl::StatusOr<BestQuery> KernelQueryFromProto(const v1::GetKernelRequest& r);
v1::Kernel KernelToProto(const ServedKernel& kernel);
// INVALID_ARGUMENT naming the field ("dtype") for values that do not
// convert; ValidateModelTune checks the rest.
absl::StatusOr<ModelTuneRequest> ModelTuneFromProto(
    const v1::TuneModelRequest& r);
v1::TuneModelResponse ModelBucketsToProto(
    const std::vector<ModelBucket>& buckets);
// INVALID_ARGUMENT naming "state" for a value outside the enum.
absl::StatusOr<std::optional<JobState>> StateFilterFromProto(int state);

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_DAEMON_PROTO_CONVERT_H_
