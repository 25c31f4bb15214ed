// A deliberate upward include: the ground including the control plane.
#pragma once
#include "coordinator/job_manager.h"
