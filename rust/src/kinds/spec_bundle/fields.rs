//! The values of a spec-bundle the document and deployment rules read: its top level
//! and its `execution`.

use crate::node::Value;

/// The top-level values the rules read, found in one pass over the root's entries
/// (`Value::get_each`) instead of one search of them for each rule and key. Of a
/// repeated key, the first, as `Value::get` finds it.
#[derive(Clone, Copy)]
pub(super) struct Fields<'t, 'i> {
    pub mode: Option<Value<'t, 'i>>,
    pub command: Option<Value<'t, 'i>>,
    pub config_format: Option<Value<'t, 'i>>,
    pub spec: Option<Value<'t, 'i>>,
    pub args: Option<Value<'t, 'i>>,
    pub declared_inputs: Option<Value<'t, 'i>>,
    pub declared_outputs: Option<Value<'t, 'i>>,
    pub compute_shape: Option<Value<'t, 'i>>,
    pub gpu_spec_key: Option<Value<'t, 'i>>,
    pub execution: Option<Value<'t, 'i>>,
    /// `compute_shape.gpus`, which three rules read.
    pub gpus: Option<Value<'t, 'i>>,
}

impl<'t, 'i> Fields<'t, 'i> {
    pub fn of(root: Value<'t, 'i>) -> Self {
        let [mode, command, config_format, spec, args, declared_inputs, declared_outputs, compute_shape, gpu_spec_key, execution] =
            root.get_each([
                "mode",
                "command",
                "config_format",
                "spec",
                "args",
                "declared_inputs",
                "declared_outputs",
                "compute_shape",
                "gpu_spec_key",
                "execution",
            ]);
        Fields {
            mode,
            command,
            config_format,
            spec,
            args,
            declared_inputs,
            declared_outputs,
            compute_shape,
            gpu_spec_key,
            execution,
            gpus: compute_shape.and_then(|c| c.get("gpus")),
        }
    }

    pub fn str_of(field: Option<Value<'t, 'i>>) -> Option<&'i str> {
        field.and_then(|v| v.as_str())
    }
}

/// The values of `execution` the rules read, found in one pass like `Fields`.
#[derive(Clone, Copy)]
pub(super) struct Execution<'t, 'i> {
    pub pre_commands: Option<Value<'t, 'i>>,
    pub post_commands: Option<Value<'t, 'i>>,
    pub environment: Option<Value<'t, 'i>>,
    pub distributed: Option<Value<'t, 'i>>,
    pub supporting_files: Option<Value<'t, 'i>>,
}

impl<'t, 'i> Execution<'t, 'i> {
    pub fn of(exec: Value<'t, 'i>) -> Self {
        let [pre_commands, post_commands, environment, distributed, supporting_files] = exec
            .get_each([
                "pre_commands",
                "post_commands",
                "environment",
                "distributed",
                "supporting_files",
            ]);
        Execution {
            pre_commands,
            post_commands,
            environment,
            distributed,
            supporting_files,
        }
    }
}
