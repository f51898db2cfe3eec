//! The simulator's teeth: broken runtime variants, each caught.
