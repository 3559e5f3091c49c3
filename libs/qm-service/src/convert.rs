//! Wire -> core conversion: one definition, in `qm_wire::to_core` (the
//! simulator converts through it too).

pub use qm_wire::to_core::*;
