package kafka_test

import (
	"fmt"
	"strconv"

	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A compacted topic of prices by product read as table updates: a record
// sets its key's row to its decoded value, a tombstone deletes the row.
// Given to NewSource, the deserializer makes the stream of a table that
// runtime.TableJoin and runtime.LeftTableJoin take.
func ExampleTableUpdates() {
	prices := kafka.TableUpdates(
		func(key []byte) (string, error) { return string(key), nil },
		func(value []byte) (int, error) { return strconv.Atoi(string(value)) })
	for _, r := range []*kgo.Record{
		{Key: []byte("tea"), Value: []byte("3")},
		{Key: []byte("tea"), Value: nil},
		{Key: []byte("cake"), Value: []byte("three")},
	} {
		u, err := prices.Deserialize(r)
		fmt.Printf("%+v %v\n", u, err)
	}
	// Output:
	// {Key:tea Value:3 Deleted:false} <nil>
	// {Key:tea Value:0 Deleted:true} <nil>
	// {Key:cake Value:0 Deleted:false} table update value of key cake: strconv.Atoi: parsing "three": invalid syntax
}
