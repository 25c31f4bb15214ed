// A deliberate include of gRPC in the core (only the network edge may).
#pragma once
#include <grpcpp/grpcpp.h>
