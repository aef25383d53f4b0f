//! One name table per enum: [`variant_names!`] gives an enum `NAMES` (every variant's name,
//! in the order listed), `name()` and `index()` (its position in `NAMES`, for tables of
//! counts), from a single list the compiler checks against the enum: a variant left out
//! makes `name`'s match non-exhaustive, a misspelt one names no variant. With a coverage
//! prefix it also gives `COVERAGE_NAMES` and `coverage_name()`, for tables where the names
//! must stay distinct from another enum's.

macro_rules! variant_names {
    ($enum:ident: $($variant:ident),+ $(,)?) => {
        impl $enum {
            /// The name of every variant, for reports and coverage tables.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($variant)),+];

            /// This variant's name (one of `NAMES`).
            pub fn name(&self) -> &'static str {
                match self {
                    $($enum::$variant { .. } => stringify!($variant)),+
                }
            }

            /// This variant's position in `NAMES` (an index into a table of counts).
            pub fn index(&self) -> usize {
                // Same variants, same order, no fields: the discriminant is the position.
                enum Position {
                    $($variant),+
                }
                match self {
                    $($enum::$variant { .. } => Position::$variant as usize),+
                }
            }
        }
    };
    ($enum:ident, coverage $prefix:literal: $($variant:ident),+ $(,)?) => {
        $crate::names::variant_names!($enum: $($variant),+);

        impl $enum {
            /// Every variant's name in coverage tables.
            pub const COVERAGE_NAMES: &'static [&'static str] =
                &[$(concat!($prefix, stringify!($variant))),+];

            /// This variant's name in coverage tables (one of `COVERAGE_NAMES`).
            pub fn coverage_name(&self) -> &'static str {
                match self {
                    $($enum::$variant { .. } => concat!($prefix, stringify!($variant))),+
                }
            }
        }
    };
}

pub(crate) use variant_names;
