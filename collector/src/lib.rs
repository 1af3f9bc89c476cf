//! sbs-profile collector library.
