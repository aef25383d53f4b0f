//! What the server counts for `GET /metrics`: the command layer's figures (both adapters
//! count here, so a message sent over HTTP and one sent over TCP are the same counter),
//! and a collector that reads the node's and the process's figures at scrape time.
//!
//! Every label set is bounded: topics by the node's limits, commands by Iggy's command
//! table, statuses by Iggy's error codes.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// A topic, by its ids (names can change; ids do not).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabels {
    pub stream_id: u32,
    pub topic_id: u32,
}

/// A command and how it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandLabels {
    pub command: &'static str,
    /// `ok`, or the snake-case name of Iggy's error code.
    pub status: &'static str,
}

/// The command layer's counters (a clone shares them).
#[derive(Default, Debug, Clone)]
pub struct CommandMetrics {
    pub messages_produced: Family<TopicLabels, Counter>,
    pub bytes_produced: Family<TopicLabels, Counter>,
    pub messages_consumed: Family<TopicLabels, Counter>,
    pub bytes_consumed: Family<TopicLabels, Counter>,
    pub commands: Family<CommandLabels, Counter>,
}

impl CommandMetrics {
    pub fn produced(&self, stream_id: u32, topic_id: u32, messages: u32, bytes: usize) {
        let topic = TopicLabels {
            stream_id,
            topic_id,
        };
        self.messages_produced
            .get_or_create(&topic)
            .inc_by(u64::from(messages));
        self.bytes_produced
            .get_or_create(&topic)
            .inc_by(bytes as u64);
    }

    pub fn consumed(&self, stream_id: u32, topic_id: u32, messages: u32, bytes: usize) {
        let topic = TopicLabels {
            stream_id,
            topic_id,
        };
        self.messages_consumed
            .get_or_create(&topic)
            .inc_by(u64::from(messages));
        self.bytes_consumed
            .get_or_create(&topic)
            .inc_by(bytes as u64);
    }

    /// One command answered: `status` is 0 for success, else Iggy's error code.
    pub fn command(&self, code: u32, status: u32) {
        let command = super::table::label(code);
        let status = match status {
            0 => "ok",
            code => iggy_common::IggyError::from_code_as_string(code),
        };
        self.commands
            .get_or_create(&CommandLabels { command, status })
            .inc();
    }
}
