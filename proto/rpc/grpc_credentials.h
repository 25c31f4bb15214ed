// The channel credentials shardctl and shardd-worker dial the coordinator
// with: plaintext without a CA; else TLS trusting that CA, presenting the
// client certificate when one is given (mutual TLS). Header-only, like
// grpc_status.h, so the worker needs no coordinator library.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "proto/rpc/tls_files.h"

namespace shardd {

inline shard::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(const TlsClientFiles& files) {
  ASSIGN_OR_RETURN(std::optional<TlsClientPems> pems, ReadTlsClientFiles(files));
  if (!pems) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pems->root_certs;
  ssl.pem_cert_chain = pems->cert_chain;
  ssl.pem_private_key = pems->private_key;
  return grpc::SslCredentials(ssl);
}

}  // namespace shardd
