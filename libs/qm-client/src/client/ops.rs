//! One typed method per API operation, made from the one table of
//! operations (`qm_wire::operations`): the request and reply types of
//! `qm_wire` (the shapes `docs/asyncapi.yaml` describes), the method named
//! as the operation in snake case.

use qm_wire::subjects::Operation;

use crate::{CallError, Client};

pub use qm_wire::operations::JobQueuePatch;

macro_rules! operations {
    ($($(#[$doc:meta])* $method:ident: $op:ident($req:ty) -> $resp:ty;)*) => {
        impl Client {
            $(
                $(#[$doc])*
                pub async fn $method(&self, request: &$req) -> Result<$resp, CallError> {
                    self.call(Operation::$op, request).await
                }
            )*
        }

        /// Every operation this client has a method for, with the
        /// method's name.
        pub const METHODS: &[(Operation, &str)] = &[$((Operation::$op, stringify!($method))),*];

        /// Every operation with the JSON Schemas of its request and of
        /// its reply's result, the types' schemas put in `generator`'s
        /// definitions (what `docs/asyncapi.yaml` says of them).
        pub fn operation_schemas(
            generator: &mut schemars::SchemaGenerator,
        ) -> Vec<(Operation, schemars::Schema, schemars::Schema)> {
            vec![$((
                Operation::$op,
                generator.subschema_for::<$req>(),
                generator.subschema_for::<$resp>(),
            )),*]
        }
    };
}

qm_wire::for_each_operation!(operations);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_a_method_named_after_it() {
        for op in Operation::ALL {
            let method = METHODS
                .iter()
                .find(|(o, _)| *o == op)
                .map(|(_, m)| *m)
                .unwrap_or_else(|| panic!("no method for {}", op.name()));
            let snake: String = op
                .name()
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let sep = (i > 0 && c.is_ascii_uppercase()).then_some('_');
                    sep.into_iter()
                        .chain(std::iter::once(c.to_ascii_lowercase()))
                })
                .collect();
            assert_eq!(method, snake);
        }
        assert_eq!(METHODS.len(), Operation::ALL.len());
    }
}
