// The elastic training runtime's public API in one include:
//   #include <aryl/aryl.h>
// Runtime (runtime.h), ElasticState and StateSource (elastic_state.h),
// ElasticSampler (elastic_sampler.h), SampleDropout (sample_random.h), CheckpointManager (checkpoint.h),
// Communicator (communicator.h), Status and Result. Training code includes
// <torch/torch.h> itself; these headers only forward-declare torch types.
#pragma once

#include "aryl/checkpoint.h"
#include "aryl/communicator.h"
#include "aryl/elastic_sampler.h"
#include "aryl/elastic_state.h"
#include "aryl/result.h"
#include "aryl/runtime.h"
#include "aryl/sample_random.h"
#include "aryl/status.h"
