// xsim native runtime: included once at the top of every generated module.
#pragma once
#include "xsim_core.h"
#include "xsim_math.h"
#include "xsim_vector.h"
#include "xsim_quat.h"
#include "xsim_random.h"
