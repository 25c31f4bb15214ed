// A deliberate upward include: the ground including the control plane.
#pragma once
#include "coordinator/jobs/job_manager.h"
