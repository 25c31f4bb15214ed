// Conversions between shard::Status and grpc::Status, shared by the server,
// the worker agent and shardctl (the only gRPC users).
#pragma once

#include <grpcpp/grpcpp.h>

#include "shard/common/status.h"

namespace shardd {

inline grpc::Status ToGrpc(const shard::Status& s) {
  using C = shard::StatusCode;
  grpc::StatusCode c = grpc::StatusCode::UNKNOWN;
  switch (s.code()) {
    case C::kOk: return grpc::Status::OK;
    case C::kInvalidArgument: c = grpc::StatusCode::INVALID_ARGUMENT; break;
    case C::kNotFound: c = grpc::StatusCode::NOT_FOUND; break;
    case C::kAlreadyExists: c = grpc::StatusCode::ALREADY_EXISTS; break;
    case C::kOutOfRange: c = grpc::StatusCode::OUT_OF_RANGE; break;
    case C::kDataLoss: c = grpc::StatusCode::DATA_LOSS; break;
    case C::kFailedPrecondition: c = grpc::StatusCode::FAILED_PRECONDITION; break;
    case C::kDeadlineExceeded: c = grpc::StatusCode::DEADLINE_EXCEEDED; break;
    case C::kAborted: c = grpc::StatusCode::ABORTED; break;
    case C::kUnavailable: c = grpc::StatusCode::UNAVAILABLE; break;
    case C::kUnimplemented: c = grpc::StatusCode::UNIMPLEMENTED; break;
    case C::kPermissionDenied: c = grpc::StatusCode::PERMISSION_DENIED; break;
    case C::kUnauthenticated: c = grpc::StatusCode::UNAUTHENTICATED; break;
    case C::kResourceExhausted: c = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case C::kInternal: c = grpc::StatusCode::INTERNAL; break;
  }
  return grpc::Status(c, s.message());
}

inline shard::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  using G = grpc::StatusCode;
  shard::StatusCode c = shard::StatusCode::kInternal;
  switch (s.error_code()) {
    case G::OK: return shard::OkStatus();
    case G::INVALID_ARGUMENT: c = shard::StatusCode::kInvalidArgument; break;
    case G::NOT_FOUND: c = shard::StatusCode::kNotFound; break;
    case G::ALREADY_EXISTS: c = shard::StatusCode::kAlreadyExists; break;
    case G::OUT_OF_RANGE: c = shard::StatusCode::kOutOfRange; break;
    case G::DATA_LOSS: c = shard::StatusCode::kDataLoss; break;
    case G::FAILED_PRECONDITION: c = shard::StatusCode::kFailedPrecondition; break;
    case G::DEADLINE_EXCEEDED: c = shard::StatusCode::kDeadlineExceeded; break;
    case G::ABORTED: case G::CANCELLED: c = shard::StatusCode::kAborted; break;
    case G::UNAVAILABLE: c = shard::StatusCode::kUnavailable; break;
    case G::UNIMPLEMENTED: c = shard::StatusCode::kUnimplemented; break;
    case G::PERMISSION_DENIED: c = shard::StatusCode::kPermissionDenied; break;
    case G::UNAUTHENTICATED: c = shard::StatusCode::kUnauthenticated; break;
    case G::RESOURCE_EXHAUSTED: c = shard::StatusCode::kResourceExhausted; break;
    default: break;
  }
  return shard::Status(c, what.empty() ? s.error_message() : what + ": " + s.error_message());
}

// "authorization: Bearer <token>" from a call's metadata ("" when absent).
inline std::string BearerToken(const grpc::CallbackServerContext* ctx) {
  auto md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return "";
  std::string v(it->second.data(), it->second.size());
  const std::string prefix = "Bearer ";
  return v.rfind(prefix, 0) == 0 ? v.substr(prefix.size()) : "";
}

}  // namespace shardd
