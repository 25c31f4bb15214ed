// The one mapping between an attempt's resume plan (shard::ResumePlan, what
// the coordinator decides and the worker builds its checkpoint tiers from)
// and its wire form (v1::ResumePlan in RegisterResponse).
#pragma once

#include "shard/ckpt/resume_plan.h"
#include "shardd/v1/worker.pb.h"

namespace shardd {

v1::ResumePlan ToResumePlanProto(const shard::ResumePlan& plan);
shard::ResumePlan FromResumePlanProto(const v1::ResumePlan& plan);

}  // namespace shardd
