// A plan as people read it (a table per GPU and per host, the step time, the
// verdict and the recommendations with their --set lines) and as scripts read
// it (JSON with every number in bytes and seconds).
#pragma once

#include <string>

#include "shard/plan/planner.h"

namespace shard::plan {

std::string FormatPlanText(const Plan& plan);
std::string PlanToJson(const Plan& plan);

// One line for refusing a submission: "does not fit: per-GPU peak ...; ...".
std::string PlanSummary(const Plan& plan);

}  // namespace shard::plan
