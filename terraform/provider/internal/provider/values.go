package provider

import (
	"context"
	"net/url"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// body is a request body built from Terraform values: a value that is null or unknown
// (not configured, or computed by the API) is left out, so the API applies its default
// or keeps what it has.
type body map[string]any

func (b body) str(name string, v types.String) {
	if known(v) {
		b[name] = v.ValueString()
	}
}

func (b body) i64(name string, v types.Int64) {
	if known(v) {
		b[name] = v.ValueInt64()
	}
}

func (b body) boolean(name string, v types.Bool) {
	if known(v) {
		b[name] = v.ValueBool()
	}
}

func (b body) strings(ctx context.Context, name string, v types.Set, diags *diag.Diagnostics) {
	if known(v) {
		b[name] = stringsOf(ctx, v, diags)
	}
}

// changes is the body of a PATCH: the attributes whose planned value differs from the
// state, each set by its own function (see body).
type changes struct {
	body
}

func (c changes) str(name string, plan, state types.String) {
	if !plan.Equal(state) {
		c.body.str(name, plan)
	}
}

func (c changes) i64(name string, plan, state types.Int64) {
	if !plan.Equal(state) {
		c.body.i64(name, plan)
	}
}

func (c changes) boolean(name string, plan, state types.Bool) {
	if !plan.Equal(state) {
		c.body.boolean(name, plan)
	}
}

func (c changes) strings(ctx context.Context, name string, plan, state types.Set, diags *diag.Diagnostics) {
	if !plan.Equal(state) {
		c.body.strings(ctx, name, plan, diags)
	}
}

// nullableI64 sends null when the configuration removed a value the API holds.
func (c changes) nullableI64(name string, plan, state types.Int64) {
	if plan.Equal(state) || plan.IsUnknown() {
		return
	}
	if plan.IsNull() {
		c.body[name] = nil
	} else {
		c.body[name] = plan.ValueInt64()
	}
}

func known(v attr.Value) bool {
	return !v.IsNull() && !v.IsUnknown()
}

func stringsOf(ctx context.Context, v types.Set, diags *diag.Diagnostics) []string {
	out := []string{}
	if !known(v) {
		return out
	}
	diags.Append(v.ElementsAs(ctx, &out, false)...)
	sort.Strings(out)
	return out
}

func setOf(values []string) types.Set {
	elements := make([]attr.Value, 0, len(values))
	for _, value := range values {
		elements = append(elements, types.StringValue(value))
	}
	return types.SetValueMust(types.StringType, elements)
}

func listOf(values []string) types.List {
	elements := make([]attr.Value, 0, len(values))
	for _, value := range values {
		elements = append(elements, types.StringValue(value))
	}
	return types.ListValueMust(types.StringType, elements)
}

// stringOrNull is null for nil: an API field that may be null.
func stringOrNull(v *string) types.String {
	if v == nil {
		return types.StringNull()
	}
	return types.StringValue(*v)
}

func int64OrNull(v *int64) types.Int64 {
	if v == nil {
		return types.Int64Null()
	}
	return types.Int64Value(*v)
}

// escape is one path segment (a name, a full topic name) as the API's routes take it.
func escape(segment string) string {
	return url.PathEscape(segment)
}

// tenantQuery is ?tenant=<slug>, which picks the tenant when the caller sees objects
// of one name in several.
func tenantQuery(tenant string) url.Values {
	if tenant == "" {
		return nil
	}
	return url.Values{"tenant": {tenant}}
}

// splitScopedID reads "<tenant>/<name>" (or a bare "<name>": the caller's only tenant).
func splitScopedID(id string) (tenant, name string) {
	if before, after, found := strings.Cut(id, "/"); found {
		return before, after
	}
	return "", id
}

// nullIfEmpty is null for an empty list: an optional set the API answers as [] when
// it was not given.
func nullIfEmpty(values []string) types.Set {
	if len(values) == 0 {
		return types.SetNull(types.StringType)
	}
	return setOf(values)
}

// emptyAsNull is null for "": an optional string the API answers as "" when it was
// not given.
func emptyAsNull(value string) types.String {
	if value == "" {
		return types.StringNull()
	}
	return types.StringValue(value)
}

// topicTenant is the tenant of a topic: the state's tenant, else (an import, which sets
// only the id) the slug its full name starts with.
func topicTenant(tenant types.String, fullName string) string {
	if known(tenant) {
		return tenant.ValueString()
	}
	slug, _, _ := strings.Cut(fullName, ".")
	return slug
}

// fullTopicName is the topic name stands for in tenant's scope, as the API reads it: a
// name starting with "<tenant>." is a full name, any other a short one.
func fullTopicName(tenant, name string) string {
	if strings.HasPrefix(name, tenant+".") {
		return name
	}
	return tenant + "." + name
}

// topicAsNamed is the topic the API answered, written as named writes it (the
// configuration, or the state) when they are the same topic: the API takes a short or a
// full name and answers one form (full names for lanes, exports and indexes, short ones
// for mirror links), which would otherwise differ from the value configured (an
// inconsistent result after apply) or show as a change in every plan.
func topicAsNamed(tenant, answered string, named types.String) types.String {
	if known(named) && fullTopicName(tenant, named.ValueString()) == fullTopicName(tenant, answered) {
		return named
	}
	return types.StringValue(answered)
}

// topicsAsNamed is topicAsNamed for a set of topics (null when empty).
func topicsAsNamed(ctx context.Context, tenant string, answered []string, named types.Set) types.Set {
	var ignored diag.Diagnostics
	written := map[string]string{}
	for _, name := range stringsOf(ctx, named, &ignored) {
		written[fullTopicName(tenant, name)] = name
	}
	out := make([]string, 0, len(answered))
	for _, topic := range answered {
		if name, ok := written[fullTopicName(tenant, topic)]; ok {
			out = append(out, name)
		} else {
			out = append(out, topic)
		}
	}
	return nullIfEmpty(out)
}
