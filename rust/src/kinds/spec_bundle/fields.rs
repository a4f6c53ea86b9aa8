//! The values of a spec-bundle the document and deployment rules read: its top level
//! and its `execution`.

use crate::node::Value;

/// The top-level values the rules read, found in one pass over the root's entries
/// instead of one search of them for each rule and key. Of a repeated key, the first,
/// as `Value::get` finds it.
#[derive(Clone, Copy, Default)]
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
        let mut fields = Fields::default();
        for (key, value) in root.entries() {
            let slot = match key {
                "mode" => &mut fields.mode,
                "command" => &mut fields.command,
                "config_format" => &mut fields.config_format,
                "spec" => &mut fields.spec,
                "args" => &mut fields.args,
                "declared_inputs" => &mut fields.declared_inputs,
                "declared_outputs" => &mut fields.declared_outputs,
                "compute_shape" => &mut fields.compute_shape,
                "gpu_spec_key" => &mut fields.gpu_spec_key,
                "execution" => &mut fields.execution,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        fields.gpus = fields.compute_shape.and_then(|c| c.get("gpus"));
        fields
    }

    pub fn str_of(field: Option<Value<'t, 'i>>) -> Option<&'i str> {
        field.and_then(|v| v.as_str())
    }
}

/// The values of `execution` the rules read, found in one pass like `Fields`.
#[derive(Clone, Copy, Default)]
pub(super) struct Execution<'t, 'i> {
    pub pre_commands: Option<Value<'t, 'i>>,
    pub post_commands: Option<Value<'t, 'i>>,
    pub environment: Option<Value<'t, 'i>>,
    pub distributed: Option<Value<'t, 'i>>,
    pub supporting_files: Option<Value<'t, 'i>>,
}

impl<'t, 'i> Execution<'t, 'i> {
    pub fn of(exec: Value<'t, 'i>) -> Self {
        let mut fields = Execution::default();
        for (key, value) in exec.entries() {
            let slot = match key {
                "pre_commands" => &mut fields.pre_commands,
                "post_commands" => &mut fields.post_commands,
                "environment" => &mut fields.environment,
                "distributed" => &mut fields.distributed,
                "supporting_files" => &mut fields.supporting_files,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        fields
    }
}
