// The git commit stamp (DLOCK_GIT_SHA), shared with the module's build.
include!("../../build.rs");
