//! What a command prints: a [`View`] rendered as a human table or as JSON.

use iggy_binary_protocol::responses::clients::{ClientDetailsResponse, ClientResponse};
use iggy_binary_protocol::responses::consumer_groups::{
    ConsumerGroupDetailsResponse, ConsumerGroupResponse,
};
use iggy_binary_protocol::responses::consumer_offsets::ConsumerOffsetResponse;
use iggy_binary_protocol::responses::messages::SendMessagesResponse;
use iggy_binary_protocol::responses::streams::{GetStreamResponse, StreamResponse, TopicHeader};
use iggy_binary_protocol::responses::system::StatsResponse;
use iggy_binary_protocol::responses::topics::{GetTopicResponse, PartitionResponse};
use iggy_binary_protocol::responses::users::{UserDetailsResponse, UserResponse};
use iggy_binary_protocol::{WireHeaderKind, WireOptions, WireUserHeaderIterator};
use serde_json::{Map, Value};

/// Rows under named columns. Cells are JSON values so both renderings share them.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub columns: Vec<&'static str>,
    pub rows: Vec<Vec<Value>>,
}

impl Table {
    pub fn new(columns: Vec<&'static str>) -> Table {
        Table {
            columns,
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<Value>) {
        assert_eq!(
            row.len(),
            self.columns.len(),
            "a row has one cell per column"
        );
        self.rows.push(row);
    }

    /// The table as aligned text: a header line, then one line per row.
    pub fn to_text(&self) -> String {
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|row| row.iter().map(cell_text).collect())
            .collect();
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| {
                cells
                    .iter()
                    .map(|row| row[i].chars().count())
                    .chain([self.columns[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let header: Vec<String> = self.columns.iter().map(|c| c.to_uppercase()).collect();
        push_line(&mut out, &header, &widths);
        for row in &cells {
            push_line(&mut out, row, &widths);
        }
        out
    }

    /// Each row as an object keyed by column.
    pub fn to_json(&self) -> Value {
        Value::Array(
            (0..self.rows.len())
                .map(|i| Value::Object(self.row_object(i)))
                .collect(),
        )
    }

    fn row_object(&self, index: usize) -> Map<String, Value> {
        self.columns
            .iter()
            .zip(&self.rows[index])
            .map(|(column, cell)| (column.to_string(), cell.clone()))
            .collect()
    }
}

fn push_line(out: &mut String, cells: &[String], widths: &[usize]) {
    let mut line = String::new();
    for (i, cell) in cells.iter().enumerate() {
        if i > 0 {
            line.push_str("  ");
        }
        line.push_str(cell);
        if i + 1 < cells.len() {
            line.extend(std::iter::repeat_n(' ', widths[i] - cell.chars().count()));
        }
    }
    out.push_str(line.trim_end());
    out.push('\n');
}

fn cell_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    }
}

/// The output of one command.
#[derive(Debug, Clone, PartialEq)]
pub enum View {
    /// A confirmation: "stream `orders` created".
    Done(String),
    /// A list.
    List(Table),
    /// One object (a one-row table) and its named child lists.
    Object {
        fields: Table,
        children: Vec<(&'static str, Table)>,
    },
}

impl View {
    pub fn to_text(&self) -> String {
        match self {
            View::Done(message) => format!("{message}\n"),
            View::List(table) => table.to_text(),
            View::Object { fields, children } => {
                assert_eq!(fields.rows.len(), 1, "an object is one row");
                let width = fields.columns.iter().map(|c| c.len()).max().unwrap_or(0);
                let mut out = String::new();
                for (column, cell) in fields.columns.iter().zip(&fields.rows[0]) {
                    out.push_str(&format!("{column:<width$}  {}\n", cell_text(cell)));
                }
                for (name, table) in children {
                    out.push_str(&format!("\n{name}:\n"));
                    out.push_str(&table.to_text());
                }
                out
            }
        }
    }

    pub fn to_json(&self) -> String {
        let value = match self {
            View::Done(message) => serde_json::json!({ "ok": true, "message": message }),
            View::List(table) => table.to_json(),
            View::Object { fields, children } => {
                let mut object = fields.row_object(0);
                for (name, table) in children {
                    object.insert(name.to_string(), table.to_json());
                }
                Value::Object(object)
            }
        };
        serde_json::to_string_pretty(&value).expect("JSON values serialize")
    }
}

fn one_row(columns: Vec<&'static str>, row: Vec<Value>) -> Table {
    let mut table = Table::new(columns);
    table.push(row);
    table
}

const STREAM_COLUMNS: [&str; 6] = [
    "id",
    "name",
    "created_at",
    "topics",
    "size_bytes",
    "messages",
];

fn stream_row(stream: &StreamResponse) -> Vec<Value> {
    vec![
        stream.id.into(),
        stream.name.as_str().into(),
        stream.created_at.into(),
        stream.topics_count.into(),
        stream.size_bytes.into(),
        stream.messages_count.into(),
    ]
}

pub fn streams(list: &[StreamResponse]) -> View {
    let mut table = Table::new(STREAM_COLUMNS.to_vec());
    for stream in list {
        table.push(stream_row(stream));
    }
    View::List(table)
}

pub fn stream(stream: &StreamResponse) -> View {
    View::Object {
        fields: one_row(STREAM_COLUMNS.to_vec(), stream_row(stream)),
        children: Vec::new(),
    }
}

pub fn stream_details(details: &GetStreamResponse) -> View {
    View::Object {
        fields: one_row(STREAM_COLUMNS.to_vec(), stream_row(&details.stream)),
        children: vec![("topics", topics_table(&details.topics))],
    }
}

const TOPIC_COLUMNS: [&str; 10] = [
    "id",
    "name",
    "created_at",
    "partitions",
    "message_expiry",
    "max_topic_size",
    "compression",
    "size_bytes",
    "messages",
    "options",
];

fn topic_row(topic: &TopicHeader) -> Vec<Value> {
    vec![
        topic.id.into(),
        topic.name.as_str().into(),
        topic.created_at.into(),
        topic.partitions_count.into(),
        limit(topic.message_expiry),
        limit(topic.max_topic_size),
        match topic.compression_algorithm {
            1 => "none".into(),
            2 => "gzip".into(),
            other => other.into(),
        },
        topic.size_bytes.into(),
        topic.messages_count.into(),
        options(&topic.options, &topic.derived_options).into(),
    ]
}

/// 0 and u64::MAX mean "server default"/"unlimited" on the wire.
fn limit(value: u64) -> Value {
    match value {
        0 => "default".into(),
        u64::MAX => "unlimited".into(),
        value => value.into(),
    }
}

fn topics_table(list: &[TopicHeader]) -> Table {
    let mut table = Table::new(TOPIC_COLUMNS.to_vec());
    for topic in list {
        table.push(topic_row(topic));
    }
    table
}

pub fn topics(list: &[TopicHeader]) -> View {
    View::List(topics_table(list))
}

pub fn topic_details(details: &GetTopicResponse) -> View {
    View::Object {
        fields: one_row(TOPIC_COLUMNS.to_vec(), topic_row(&details.topic)),
        children: vec![("partitions", partitions_table(&details.partitions))],
    }
}

fn partitions_table(list: &[PartitionResponse]) -> Table {
    let mut table = Table::new(vec![
        "id",
        "created_at",
        "segments",
        "current_offset",
        "size_bytes",
        "messages",
    ]);
    for partition in list {
        table.push(vec![
            partition.id.into(),
            partition.created_at.into(),
            partition.segments_count.into(),
            partition.current_offset.into(),
            partition.size_bytes.into(),
            partition.messages_count.into(),
        ]);
    }
    table
}

/// Option blocks as `key=value` pairs (explicit, then derived).
fn options(explicit: &WireOptions, derived: &WireOptions) -> String {
    let pairs: Vec<String> = explicit
        .iter()
        .chain(derived.iter())
        .map(|entry| {
            format!(
                "{}={}",
                String::from_utf8_lossy(entry.key),
                typed_value(entry.value_kind, entry.value)
            )
        })
        .collect();
    pairs.join(",")
}

/// A TLV value as text: strings as is, integers decoded, the rest hex.
fn typed_value(kind: WireHeaderKind, value: &[u8]) -> String {
    let int = |n: usize| -> Option<u64> {
        (value.len() == n).then(|| {
            let mut bytes = [0u8; 8];
            bytes[..n].copy_from_slice(value);
            u64::from_le_bytes(bytes)
        })
    };
    let decoded = match kind.0 {
        2 => Some(String::from_utf8_lossy(value).into_owned()),
        3 => value.first().map(|&b| (b != 0).to_string()),
        9 => int(1).map(|v| v.to_string()),
        10 => int(2).map(|v| v.to_string()),
        11 => int(4).map(|v| v.to_string()),
        12 => int(8).map(|v| v.to_string()),
        _ => None,
    };
    decoded.unwrap_or_else(|| hex(value))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// User headers of a message as `key=value` pairs; undecodable bytes as hex.
pub fn user_headers(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return String::new();
    }
    if iggy_binary_protocol::validate_user_headers(bytes).is_err() {
        return hex(bytes);
    }
    WireUserHeaderIterator::new(bytes)
        .map(|entry| {
            format!(
                "{}={}",
                typed_value(entry.key_kind, entry.key),
                typed_value(entry.value_kind, entry.value)
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

const GROUP_COLUMNS: [&str; 4] = ["id", "name", "partitions", "members"];

fn group_row(group: &ConsumerGroupResponse) -> Vec<Value> {
    vec![
        group.id.into(),
        group.name.as_str().into(),
        group.partitions_count.into(),
        group.members_count.into(),
    ]
}

pub fn groups(list: &[ConsumerGroupResponse]) -> View {
    let mut table = Table::new(GROUP_COLUMNS.to_vec());
    for group in list {
        table.push(group_row(group));
    }
    View::List(table)
}

pub fn group_details(details: &ConsumerGroupDetailsResponse) -> View {
    let mut members = Table::new(vec!["id", "partitions"]);
    for member in &details.members {
        let partitions: Vec<Value> = member.partitions.iter().map(|&p| p.into()).collect();
        members.push(vec![member.id.into(), Value::Array(partitions)]);
    }
    View::Object {
        fields: one_row(GROUP_COLUMNS.to_vec(), group_row(&details.group)),
        children: vec![("members", members)],
    }
}

const USER_COLUMNS: [&str; 4] = ["id", "username", "status", "created_at"];

fn user_row(user: &UserResponse) -> Vec<Value> {
    vec![
        user.id.into(),
        user.username.as_str().into(),
        match user.status {
            1 => "active".into(),
            2 => "inactive".into(),
            other => other.into(),
        },
        user.created_at.into(),
    ]
}

pub fn users(list: &[UserResponse]) -> View {
    let mut table = Table::new(USER_COLUMNS.to_vec());
    for user in list {
        table.push(user_row(user));
    }
    View::List(table)
}

pub fn user_details(details: &UserDetailsResponse) -> View {
    let mut fields = one_row(USER_COLUMNS.to_vec(), user_row(&details.user));
    fields.columns.push("permissions");
    let permissions = match &details.permissions {
        None => Value::Null,
        Some(p) => {
            let g = &p.global;
            let flags = [
                ("manage_servers", g.manage_servers),
                ("read_servers", g.read_servers),
                ("manage_users", g.manage_users),
                ("read_users", g.read_users),
                ("manage_streams", g.manage_streams),
                ("read_streams", g.read_streams),
                ("manage_topics", g.manage_topics),
                ("read_topics", g.read_topics),
                ("poll_messages", g.poll_messages),
                ("send_messages", g.send_messages),
            ];
            let set: Vec<&str> = flags
                .iter()
                .filter(|(_, on)| *on)
                .map(|(n, _)| *n)
                .collect();
            Value::String(set.join(","))
        }
    };
    fields.rows[0].push(permissions);
    View::Object {
        fields,
        children: Vec::new(),
    }
}

const CLIENT_COLUMNS: [&str; 5] = ["client_id", "user_id", "transport", "address", "groups"];

fn client_row(client: &ClientResponse) -> Vec<Value> {
    vec![
        client.client_id.into(),
        if client.user_id == u32::MAX {
            Value::Null
        } else {
            client.user_id.into()
        },
        match client.transport {
            1 => "tcp".into(),
            2 => "quic".into(),
            4 => "websocket".into(),
            other => other.into(),
        },
        client.address.as_str().into(),
        client.consumer_groups_count.into(),
    ]
}

pub fn clients(list: &[ClientResponse]) -> View {
    let mut table = Table::new(CLIENT_COLUMNS.to_vec());
    for client in list {
        table.push(client_row(client));
    }
    View::List(table)
}

pub fn client_details(details: &ClientDetailsResponse) -> View {
    let mut groups = Table::new(vec!["stream_id", "topic_id", "group_id"]);
    for group in &details.consumer_groups {
        groups.push(vec![
            group.stream_id.into(),
            group.topic_id.into(),
            group.group_id.into(),
        ]);
    }
    View::Object {
        fields: one_row(CLIENT_COLUMNS.to_vec(), client_row(&details.client)),
        children: vec![("consumer_groups", groups)],
    }
}

pub fn offset(offset: &ConsumerOffsetResponse) -> View {
    View::Object {
        fields: one_row(
            vec!["partition_id", "current_offset", "stored_offset"],
            vec![
                offset.partition_id.into(),
                offset.current_offset.into(),
                offset.stored_offset.into(),
            ],
        ),
        children: Vec::new(),
    }
}

pub fn sent(count: usize, response: &SendMessagesResponse) -> View {
    if response.confirmations.is_empty() {
        return View::Done(format!("sent {count} message(s)"));
    }
    let mut table = Table::new(vec!["stream_id", "topic_id", "partition_id", "base_offset"]);
    for confirmation in &response.confirmations {
        table.push(vec![
            confirmation.stream_id.into(),
            confirmation.topic_id.into(),
            confirmation.partition_id.into(),
            confirmation.base_offset.into(),
        ]);
    }
    View::List(table)
}

pub fn stats(stats: &StatsResponse) -> View {
    let fields: Vec<(&'static str, Value)> = vec![
        ("process_id", stats.process_id.into()),
        ("server_version", stats.iggy_server_version.as_str().into()),
        ("hostname", stats.hostname.as_str().into()),
        (
            "os",
            format!("{} {}", stats.os_name, stats.os_version)
                .trim()
                .into(),
        ),
        ("run_time_us", stats.run_time.into()),
        ("streams", stats.streams_count.into()),
        ("topics", stats.topics_count.into()),
        ("partitions", stats.partitions_count.into()),
        ("segments", stats.segments_count.into()),
        ("messages", stats.messages_count.into()),
        ("messages_size_bytes", stats.messages_size_bytes.into()),
        ("clients", stats.clients_count.into()),
        ("consumer_groups", stats.consumer_groups_count.into()),
        ("memory_usage", stats.memory_usage.into()),
        ("free_disk_space", stats.free_disk_space.into()),
        ("total_disk_space", stats.total_disk_space.into()),
    ];
    let (columns, row): (Vec<_>, Vec<_>) = fields.into_iter().unzip();
    View::Object {
        fields: one_row(columns, row),
        children: Vec::new(),
    }
}

/// Polled messages: offset, id, timestamp, payload (UTF-8, lossy) and headers.
pub fn messages(polled: &crate::Polled) -> Result<View, super::error::CliError> {
    let mut table = Table::new(vec![
        "offset",
        "id",
        "timestamp",
        "origin_timestamp",
        "payload",
        "headers",
    ]);
    for message in polled.messages() {
        let message = message.map_err(super::error::CliError::BadRecords)?;
        table.push(vec![
            message.offset.into(),
            format!("{:032x}", message.id).into(),
            message.timestamp.into(),
            message.origin_timestamp.into(),
            String::from_utf8_lossy(message.payload).into_owned().into(),
            user_headers(message.user_headers).into(),
        ]);
    }
    Ok(View::List(table))
}
