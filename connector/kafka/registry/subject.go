package registry

// SubjectNameStrategy names the subject a schema is registered under,
// from the topic written to, whether the schema is the key's, and the
// schema's full record name ("" for a schema that is not a named type).
type SubjectNameStrategy func(topic string, key bool, recordName string) string

// TopicName is Confluent's default (TopicNameStrategy): "<topic>-key" or
// "<topic>-value". One schema lineage per topic and part.
func TopicName(topic string, key bool, _ string) string {
	if key {
		return topic + "-key"
	}
	return topic + "-value"
}

// RecordName is Confluent's RecordNameStrategy: the record's full name,
// so one record type evolves under one subject across all topics, and a
// topic may carry several record types.
func RecordName(_ string, _ bool, recordName string) string { return recordName }

// TopicRecordName is Confluent's TopicRecordNameStrategy:
// "<topic>-<record full name>", one lineage per record type and topic.
func TopicRecordName(topic string, _ bool, recordName string) string {
	return topic + "-" + recordName
}
