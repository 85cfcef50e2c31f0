package protocol

// The runtime configuration's messages (CONFIG_GET, CONFIG_LIST, CONFIG_SET and their
// reply CONFIG_VALUES): the settings server/settings names, read and changed on a
// running cluster.

// Bounds of the configuration's keys and values.
const (
	MaxConfigKeyLen   = 512  // a setting's name, a namespace and a concurrency key fit
	MaxConfigValueLen = 1024 // every setting's value is far shorter
	// MaxConfigValues bounds the entries of one CONFIG_VALUES.
	MaxConfigValues = 4096
)

// ConfigGet asks for one runtime setting as the answering node applies it.
type ConfigGet struct {
	ID  uint64
	Key string // "key"
}

// ConfigList asks for every runtime setting: the plain keys, set or not, and every key
// set.
type ConfigList struct{ ID uint64 }

// ConfigSet sets a runtime setting for the whole cluster (Value), or removes it (Reset),
// so that every node goes back to its default. Exactly one of "value" and "reset": true.
type ConfigSet struct {
	ID    uint64
	Key   string // "key"
	Value string // "value"
	Reset bool   // "reset"
}

// ConfigValues answers CONFIG_GET, CONFIG_LIST and CONFIG_SET: the settings as the
// answering node applies them, at the configuration's revision Rev.
type ConfigValues struct {
	ID     uint64
	Rev    uint64        // "rev": the etcd revision of the configuration in effect (without etcd, a count of changes)
	Values []ConfigValue // "values", sorted by key
}

// ConfigValue is one setting of a CONFIG_VALUES.
type ConfigValue struct {
	Key   string // "key"
	Value string // "value": the value in effect, canonical
	Set   bool   // "set": set in the cluster's configuration; false: the node's default
}

var configValueSpec = newMapSpec(false,
	strField("key", MaxConfigKeyLen, func(v *ConfigValue) *string { return &v.Key }).req(),
	strField("value", MaxConfigValueLen, func(v *ConfigValue) *string { return &v.Value }).req(),
	boolField("set", func(v *ConfigValue) *bool { return &v.Set }),
)

var (
	configGetSpec = message(TypeConfigGet, byClient|byWorker,
		strField("key", MaxConfigKeyLen, func(m *ConfigGet) *string { return &m.Key }).req())
	configListSpec = message[ConfigList](TypeConfigList, byClient|byWorker)
	configSetSpec  = message(TypeConfigSet, byClient|byWorker,
		strField("key", MaxConfigKeyLen, func(m *ConfigSet) *string { return &m.Key }).req(),
		strField("value", MaxConfigValueLen, func(m *ConfigSet) *string { return &m.Value }).
			omitIf(func(m *ConfigSet) bool { return m.Reset }), // written when not Reset, even empty
		boolField("reset", func(m *ConfigSet) *bool { return &m.Reset }),
	)
	configValuesSpec = message(TypeConfigValues, byServer,
		uintField("rev", func(m *ConfigValues) *uint64 { return &m.Rev }).req(),
		arrayField("values", MaxConfigValues, specMaps(configValueSpec), func(m *ConfigValues) *[]ConfigValue { return &m.Values }).req(),
	)
)

// configSetValue is the presence bit of CONFIG_SET's "value".
var configSetValue = configSetSpec.bit("value")

// checkFields: exactly one of "value" and "reset": true.
func (m *ConfigSet) checkFields(d *dec, present uint64) *Error {
	if (present&configSetValue != 0) == m.Reset {
		return d.at(d.r.badField(`give exactly one of "value" and "reset": true`), "value")
	}
	return nil
}

func (m *ConfigGet) Type() Type           { return TypeConfigGet }
func (m *ConfigGet) RequestID() uint64    { return m.ID }
func (m *ConfigGet) setID(id uint64)      { m.ID = id }
func (m *ConfigList) Type() Type          { return TypeConfigList }
func (m *ConfigList) RequestID() uint64   { return m.ID }
func (m *ConfigList) setID(id uint64)     { m.ID = id }
func (m *ConfigSet) Type() Type           { return TypeConfigSet }
func (m *ConfigSet) RequestID() uint64    { return m.ID }
func (m *ConfigSet) setID(id uint64)      { m.ID = id }
func (m *ConfigValues) Type() Type        { return TypeConfigValues }
func (m *ConfigValues) RequestID() uint64 { return m.ID }
func (m *ConfigValues) setID(id uint64)   { m.ID = id }
