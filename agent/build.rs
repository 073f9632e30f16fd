// The binary links libtorch through ecn-models, and a build script's link arguments do not
// pass on to dependents: the same rpath is needed here.
include!("../models/build.rs");
