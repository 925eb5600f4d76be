// xsim native runtime: included once at the top of every generated module.
#pragma once
#include "xsim_core.h"
#include "xsim_math.h"
#include "xsim_vector.h"
#include "xsim_quat.h"
#include "xsim_mathlib.h"
#include "xsim_linalg.h"
#include "xsim_expect.h"
#include "xsim_random.h"
#include "xsim_geometry.h"
#include "xsim_tile.h"
