//! Loading the configuration in layers: the defaults, the TOML file, then one layer per
//! `CAIRN_*` variable, each a figment provider whose metadata says where its values came
//! from; an unknown key or a badly typed value is refused naming its origin. Also the way
//! back: [`ServerConfig::to_toml`].

use super::{
    ConfigError, Origin, ServerConfig, CLIENT_VARS, DEFAULT_CONFIG_FILE, ENV_PREFIX, PASSWORD_MASK,
};
use figment::value::{Dict, Value};
use figment::{Figment, Metadata, Profile, Provider};
use std::path::{Path, PathBuf};

/// Loads the configuration: the defaults, then `file` (or `./cairn.toml` when `file` is
/// none and it exists), then the `CAIRN_*` variables among `vars`, then checks ranges.
/// The binary passes `std::env::vars()`.
pub fn load(
    file: Option<&Path>,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<ServerConfig, ConfigError> {
    load_layers(Some(file_source(file)), vars)
}

/// The file to read and whether it must exist: the given one, else `./cairn.toml` if any.
pub(super) fn file_source(file: Option<&Path>) -> (PathBuf, bool) {
    match file {
        Some(path) => (path.to_path_buf(), true),
        None => (PathBuf::from(DEFAULT_CONFIG_FILE), false),
    }
}

/// `file`: the path and whether it must exist.
pub(super) fn load_layers(
    file: Option<(PathBuf, bool)>,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<ServerConfig, ConfigError> {
    let schema = schema();
    let mut figment = Figment::new();
    let mut file_path = None;
    if let Some((path, required)) = file {
        if let Some(text) = read_file(&path, required)? {
            let table: toml::Table = toml::from_str(&text).map_err(|e| ConfigError::Syntax {
                path: path.clone(),
                message: syntax_message(&text, &e),
            })?;
            let dict = Value::serialize(&table)
                .ok()
                .and_then(Value::into_dict)
                .ok_or_else(|| ConfigError::Syntax {
                    path: path.clone(),
                    message: "not a table of keys".into(),
                })?;
            figment = figment.merge(Layer {
                metadata: Metadata::from("config file", path.as_path()),
                dict,
            });
            file_path = Some(path);
        }
    }
    let mut vars: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(name, _)| name.starts_with(ENV_PREFIX) && !CLIENT_VARS.contains(&name.as_str()))
        .collect();
    vars.sort();
    for (name, raw) in vars {
        let (key, value) = env_value(&schema, &name, raw)?;
        figment = figment.merge(Layer {
            metadata: Metadata::named(name),
            dict: nest(&key, value),
        });
    }
    let origin_of = |key: &str| match figment.find_metadata(key) {
        Some(metadata) => origin(metadata, file_path.as_deref()),
        None => Origin::Default,
    };
    let config: ServerConfig = figment
        .extract()
        .map_err(|e| from_figment(e, file_path.as_deref(), &origin_of))?;
    config.validate_with(&origin_of)?;
    Ok(config)
}

/// The file's text; none when it is not there and not required.
#[allow(
    clippy::disallowed_methods,
    reason = "the configuration is read once at start, before the Env exists (it is made from it)"
)]
fn read_file(path: &Path, required: bool) -> Result<Option<String>, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if required {
                Err(ConfigError::MissingFile {
                    path: path.to_path_buf(),
                })
            } else {
                Ok(None)
            }
        }
        Err(source) => Err(ConfigError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// One layer: a file's keys or one environment variable's.
struct Layer {
    metadata: Metadata,
    dict: Dict,
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<figment::value::Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

fn nest(key: &str, value: Value) -> Dict {
    match figment::util::nest(key, value) {
        Value::Dict(_, dict) => dict,
        _ => unreachable!("nest makes a dict of a non-empty key"),
    }
}

fn origin(metadata: &Metadata, file: Option<&Path>) -> Origin {
    match (&metadata.source, file) {
        (Some(figment::Source::File(_)), Some(file)) => Origin::File(file.to_path_buf()),
        _ if metadata.name.starts_with(ENV_PREFIX) => Origin::Env(metadata.name.to_string()),
        _ => Origin::Default,
    }
}

/// Every key with a value of its type: the defaults, with a password so that it is there.
fn schema() -> Dict {
    let mut config = ServerConfig::default();
    config.root.password = Some(String::new());
    config.cluster.secret = Some(String::new());
    config.tcp.tls.cert_file = Some(PathBuf::new());
    config.tcp.tls.key_file = Some(PathBuf::new());
    config.http.tls.cert_file = Some(PathBuf::new());
    config.http.tls.key_file = Some(PathBuf::new());
    Value::serialize(config)
        .ok()
        .and_then(Value::into_dict)
        .expect("the configuration serializes to a dict")
}

/// The keys of `section` (or the top-level keys) in their declared order, sections as
/// `name.*`: asked of serde itself, by the error an unknown key gets.
fn keys_of(schema: &Dict, section: Option<&str>) -> Vec<String> {
    let probe = "\u{0}";
    let key = match section {
        Some(section) => format!("{section}.{probe}"),
        None => probe.to_string(),
    };
    let figment = Figment::new().merge(Layer {
        metadata: Metadata::named("probe"),
        dict: nest(&key, Value::from(0)),
    });
    let fields: &[&str] = match figment.extract::<ServerConfig>() {
        Err(e) => match e.into_iter().next().map(|e| e.kind) {
            Some(figment::error::Kind::UnknownField(_, fields)) => fields,
            _ => &[],
        },
        Ok(_) => &[],
    };
    let dict = match section {
        Some(section) => table(schema, section),
        None => Some(schema),
    };
    fields
        .iter()
        .map(|field| match dict.and_then(|dict| dict.get(*field)) {
            Some(Value::Dict(..)) => format!("{field}.*"),
            _ => field.to_string(),
        })
        .collect()
}

/// The table at the dotted `path` (`tcp`, `tcp.tls`).
fn table<'a>(schema: &'a Dict, path: &str) -> Option<&'a Dict> {
    path.split('.')
        .try_fold(schema, |dict, name| dict.get(name).and_then(Value::as_dict))
}

/// The key `name` sets and its value, typed as the key is (the variable's text is taken
/// whole: a password of digits stays a string).
fn env_value(schema: &Dict, name: &str, raw: String) -> Result<(String, Value), ConfigError> {
    let rest = &name[ENV_PREFIX.len()..];
    let lower = rest.to_ascii_lowercase();
    let unknown = |key: String, expected: Vec<String>| ConfigError::UnknownKey {
        key,
        origin: Origin::Env(name.to_string()),
        expected,
    };
    // Down the tables the name starts with (`tcp_` and then `tls_` in CAIRN_TCP_TLS_ENABLED),
    // stopping at a key of the table reached.
    let mut section: Vec<&str> = Vec::new();
    let mut dict = schema;
    let mut field = lower.as_str();
    while dict
        .get(field)
        .is_none_or(|value| value.as_dict().is_some())
    {
        let inner = dict.iter().find_map(|(key, value)| {
            let rest = field.strip_prefix(key.as_str())?.strip_prefix('_')?;
            Some((key, value.as_dict()?, rest))
        });
        let Some((key, inner, rest)) = inner else {
            break;
        };
        section.push(key);
        dict = inner;
        field = rest;
    }
    let within = |name: &str| match section.is_empty() {
        true => name.to_string(),
        false => format!("{}.{name}", section.join(".")),
    };
    if dict
        .get(field)
        .is_some_and(|value| value.as_dict().is_some())
    {
        let table = within(field);
        return Err(ConfigError::SectionVariable {
            var: name.to_string(),
            expected: keys_of(schema, Some(&table))
                .iter()
                .map(|k| k.to_ascii_uppercase().replace(".*", "_*"))
                .collect(),
            section: table,
        });
    }
    let section = (!section.is_empty()).then(|| section.join("."));
    let (key, expected, kind) = (
        within(field),
        keys_of(schema, section.as_deref()),
        dict.get(field),
    );
    // Variable names are upper case: CAIRN_Tcp_Address names no key.
    let kind = match kind {
        Some(kind) if rest == rest.to_ascii_uppercase() => kind,
        _ => return Err(unknown(key, expected)),
    };
    let value = match kind {
        Value::Bool(..) => match raw.as_str() {
            "true" => Value::from(true),
            "false" => Value::from(false),
            _ => Value::from(raw),
        },
        Value::Num(..) => {
            if let Ok(n) = raw.parse::<u64>() {
                Value::from(n)
            } else if let Ok(n) = raw.parse::<i64>() {
                Value::from(n)
            } else {
                Value::from(raw)
            }
        }
        // A list (`CAIRN_CLUSTER_MEMBERS`): the variable holds it as a TOML array.
        Value::Array(..) => toml_array(&raw).unwrap_or(Value::from(raw)),
        _ => Value::from(raw),
    };
    Ok((key, value))
}

/// Where a TOML syntax error is and what it is, never the text around it: the line may
/// hold a secret (review S19).
fn syntax_message(text: &str, error: &toml::de::Error) -> String {
    let what = error.message().trim_end();
    match error.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {what}")
        }
        None => what.to_string(),
    }
}

fn from_figment(
    error: figment::Error,
    file: Option<&Path>,
    origin_of: &dyn Fn(&str) -> Origin,
) -> ConfigError {
    let error = error
        .into_iter()
        .next()
        .expect("an error holds one at least");
    let key = error.path.join(".");
    let origin = match &error.metadata {
        Some(metadata) => origin(metadata, file),
        None => origin_of(&key),
    };
    match error.kind {
        figment::error::Kind::UnknownField(_, expected) => ConfigError::UnknownKey {
            key,
            origin,
            expected: expected.iter().map(|s| s.to_string()).collect(),
        },
        kind => {
            let message = if SECRET_KEYS.contains(&key.as_str()) {
                secret_message(&kind)
            } else {
                kind.to_string()
            };
            ConfigError::Invalid {
                key,
                origin,
                message,
            }
        }
    }
}

/// Keys whose values no error ever shows (the error goes to stderr, and from there to a
/// log others may read).
const SECRET_KEYS: [&str; 2] = ["root.password", "cluster.secret"];

/// A variable's text read as a TOML array (`[{id = 1, …}, …]`); none when it is not one (the
/// key's own check then says what was expected).
fn toml_array(raw: &str) -> Option<Value> {
    let table: toml::Table = toml::from_str(&format!("value = {raw}")).ok()?;
    let array = table.get("value")?.as_array()?;
    Value::serialize(array).ok()
}

/// What was wrong with a secret's value, without the value.
fn secret_message(kind: &figment::error::Kind) -> String {
    match kind {
        figment::error::Kind::InvalidType(_, expected) => {
            format!("invalid type: expected {expected} (the value is not shown: it is a secret)")
        }
        _ => "invalid value (not shown: it is a secret)".into(),
    }
}

impl ServerConfig {
    /// The configuration as TOML, for `--print-config`: loading it again gives the same
    /// configuration, except that a root password prints as [`PASSWORD_MASK`].
    pub fn to_toml(&self) -> String {
        let mut shown = self.clone();
        if shown.root.password.is_some() {
            shown.root.password = Some(PASSWORD_MASK.into());
        }
        if shown.cluster.secret.is_some() {
            shown.cluster.secret = Some(PASSWORD_MASK.into());
        }
        toml::to_string(&shown).expect("the configuration serializes to TOML")
    }
}
