// The PEM files of TLS on the control plane, checked and read the same way by
// shardd, shardd-worker and shardctl: a certificate and its key come together,
// a client certificate only over TLS, and each error names the flag (or
// environment variable) and the path. No gRPC here: the gRPC edge turns the
// texts into credentials. Header-only, like grpc_status.h, so the worker needs
// no coordinator library.
#pragma once

#include <optional>
#include <string>

#include "shard/common/file_util.h"
#include "shard/common/status.h"

namespace shardd {

// What a PEM file must hold: its BEGIN line ends in this.
inline constexpr const char* kPemCertificate = "CERTIFICATE";
inline constexpr const char* kPemPrivateKey = "PRIVATE KEY";

// Both or neither. `cert_name`/`key_name` are how the user spelled them
// ("--tls-cert", "SHARDD_TLS_KEY").
inline shard::Status CheckCertKeyPair(const std::string& cert, const std::string& key, const std::string& cert_name,
                                      const std::string& key_name) {
  if (cert.empty() == key.empty()) return shard::OkStatus();
  const std::string& given = cert.empty() ? key_name : cert_name;
  const std::string& missing = cert.empty() ? cert_name : key_name;
  return shard::InvalidArgument(given + " without " + missing +
                                ": a certificate and its private key go together (give both or neither)");
}

// `text` (read from `path`, given as `name`) holds a PEM block of `kind`
// (kPemCertificate or kPemPrivateKey). Catches the usual mix-ups before gRPC
// reports them as a failed handshake: a swapped certificate and key, a DER
// file, an empty file.
inline shard::Status CheckPem(const std::string& text, const char* kind, const std::string& name,
                              const std::string& path) {
  // "-----BEGIN CERTIFICATE-----", "-----BEGIN RSA PRIVATE KEY-----", ...
  for (size_t at = text.find("-----BEGIN "); at != std::string::npos; at = text.find("-----BEGIN ", at + 1)) {
    const size_t end = text.find("-----", at + 11);
    if (end == std::string::npos) break;
    const std::string label = text.substr(at + 11, end - at - 11);
    const std::string want = kind;
    if (label.size() >= want.size() && label.compare(label.size() - want.size(), want.size(), want) == 0)
      return shard::OkStatus();
  }
  const bool is_cert = std::string(kind) == kPemCertificate;
  return shard::InvalidArgument(name + " " + path + ": no PEM " + (is_cert ? "certificate" : "private key") +
                                " in it (expected a -----BEGIN " + kind + "----- block" +
                                (is_cert ? "" : "; were the certificate and key swapped?") + ")");
}

// Reads and checks one PEM file.
inline shard::StatusOr<std::string> ReadPem(const std::string& path, const char* kind, const std::string& name) {
  auto text = shard::ReadFileToString(path);
  if (!text.ok()) return shard::NotFound(name + " " + path + ": " + text.status().message());
  RETURN_IF_ERROR(CheckPem(*text, kind, name, path));
  return *text;
}

// The files a client of the coordinator (shardctl, shardd-worker) uses.
struct TlsClientFiles {
  std::string ca;    // verify the coordinator with this CA ("" = plaintext)
  std::string cert;  // present this certificate chain (mutual TLS); with key, or neither
  std::string key;   // the certificate's private key
  // What errors call each file: the flag or environment variable it came from.
  std::string ca_name = "--tls-ca", cert_name = "--tls-cert", key_name = "--tls-key";
};

// Pure: cert and key together, and only over TLS (a CA given).
inline shard::Status CheckTlsClientFiles(const TlsClientFiles& f) {
  RETURN_IF_ERROR(CheckCertKeyPair(f.cert, f.key, f.cert_name, f.key_name));
  if (!f.cert.empty() && f.ca.empty())
    return shard::InvalidArgument(f.cert_name + "/" + f.key_name + " need " + f.ca_name +
                                  ": a client certificate is presented only over TLS");
  return shard::OkStatus();
}

// The texts for grpc::SslCredentialsOptions.
struct TlsClientPems {
  std::string root_certs;   // pem_root_certs
  std::string cert_chain;   // pem_cert_chain ("" = no client certificate)
  std::string private_key;  // pem_private_key
};

// Checks and reads a client's files; nullopt means plaintext (no CA).
inline shard::StatusOr<std::optional<TlsClientPems>> ReadTlsClientFiles(const TlsClientFiles& f) {
  RETURN_IF_ERROR(CheckTlsClientFiles(f));
  if (f.ca.empty()) return std::optional<TlsClientPems>();
  TlsClientPems p;
  ASSIGN_OR_RETURN(p.root_certs, ReadPem(f.ca, kPemCertificate, f.ca_name));
  if (!f.cert.empty()) {
    ASSIGN_OR_RETURN(p.cert_chain, ReadPem(f.cert, kPemCertificate, f.cert_name));
    ASSIGN_OR_RETURN(p.private_key, ReadPem(f.key, kPemPrivateKey, f.key_name));
  }
  return std::optional<TlsClientPems>(std::move(p));
}

}  // namespace shardd
