package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func newTopicResource() resource.Resource { return &topicResource{} }

type topicResource struct{ base }

type topicModel struct {
	ID                    types.String `tfsdk:"id"`
	Tenant                types.String `tfsdk:"tenant"`
	Name                  types.String `tfsdk:"name"`
	FullName              types.String `tfsdk:"full_name"`
	Region                types.String `tfsdk:"region"`
	Cluster               types.String `tfsdk:"cluster"`
	Partitions            types.Int64  `tfsdk:"partitions"`
	ReplicationFactor     types.Int64  `tfsdk:"replication_factor"`
	RetentionMs           types.Int64  `tfsdk:"retention_ms"`
	RetentionBytes        types.Int64  `tfsdk:"retention_bytes"`
	MaxMessageBytes       types.Int64  `tfsdk:"max_message_bytes"`
	Durability            types.String `tfsdk:"durability"`
	MinInsyncReplicas     types.Int64  `tfsdk:"min_insync_replicas"`
	UncleanLeaderElection types.Bool   `tfsdk:"unclean_leader_election"`
	RemoteStorage         types.Bool   `tfsdk:"remote_storage"`
	LocalRetentionMs      types.Int64  `tfsdk:"local_retention_ms"`
	LocalRetentionBytes   types.Int64  `tfsdk:"local_retention_bytes"`
	MaxSegmentBytes       types.Int64  `tfsdk:"max_segment_bytes"`
	SegmentMs             types.Int64  `tfsdk:"segment_ms"`
	Status                types.String `tfsdk:"status"`
}

// topicJSON is a topic as the API answers it (GET /topics/{full_name}).
type topicJSON struct {
	FullName              string `json:"full_name"`
	Tenant                string `json:"tenant"`
	Name                  string `json:"name"`
	Region                string `json:"region"`
	Cluster               string `json:"cluster"`
	Partitions            int64  `json:"partitions"`
	ReplicationFactor     int64  `json:"replication_factor"`
	RetentionMs           int64  `json:"retention_ms"`
	RetentionBytes        int64  `json:"retention_bytes"`
	MaxMessageBytes       int64  `json:"max_message_bytes"`
	Durability            string `json:"durability"`
	MinInsyncReplicas     int64  `json:"min_insync_replicas"`
	UncleanLeaderElection bool   `json:"unclean_leader_election"`
	RemoteStorage         bool   `json:"remote_storage"`
	LocalRetentionMs      int64  `json:"local_retention_ms"`
	LocalRetentionBytes   int64  `json:"local_retention_bytes"`
	MaxSegmentBytes       int64  `json:"max_segment_bytes"`
	SegmentMs             int64  `json:"segment_ms"`
	Status                string `json:"status"`
	StatusReason          string `json:"status_reason"`
	Generation            int64  `json:"generation"`
	ObservedGeneration    int64  `json:"observed_generation"`
}

func (r *topicResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_topic"
}

func optionalInt(description string) schema.Int64Attribute {
	return schema.Int64Attribute{Optional: true, Computed: true, PlanModifiers: keepInt64, Description: description}
}

func (r *topicResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A topic of a tenant, `<tenant>.<name>`, in a region (its origin; mirror copies are the mirror link's). " +
			"Creating waits until its partitions exist on the brokers (status `ready`); deleting waits until it is gone. " +
			"Changing `tenant`, `name`, `region` or `replication_factor`, lowering `partitions` or turning `remote_storage` off " +
			"replaces the topic (its records are lost); everything else changes in place.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "The full name, `<tenant>.<name>`."},
			"tenant": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Description: "The tenant's slug; default: the caller's only tenant."},
			"name": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
				Description: "The name after `<tenant>.`."},
			"full_name": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "`<tenant>.<name>`, as producers and consumers name it."},
			"region": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Description: "The region it lives in; default: the tenant's home region."},
			"cluster": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "The cluster of the region that holds it."},
			"partitions": schema.Int64Attribute{Required: true,
				PlanModifiers: []planmodifier.Int64{int64Decrease("Partitions only grow in place: fewer replaces the topic.")},
				Description:   "How many partitions; raising it grows the topic in place, lowering it replaces the topic."},
			"replication_factor": schema.Int64Attribute{Optional: true, Computed: true, PlanModifiers: keepReplInt64,
				Description: "Brokers per partition; default 3, or the cluster's broker count. Cannot change in place: a change replaces the topic."},
			"retention_ms":      optionalInt("How long records stay, in ms."),
			"retention_bytes":   optionalInt("Per partition: the oldest segments go beyond this size."),
			"max_message_bytes": optionalInt("The largest record batch a producer may write."),
			"durability": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepString,
				Validators:  []validator.String{stringvalidator.OneOf("always", "interval", "never")},
				Description: "When appends reach the disk: `always` (fsync before the answer), `interval` or `never` (rely on replication)."},
			"min_insync_replicas": optionalInt("Replicas in sync for an acks=all write; default min(2, replication_factor)."),
			"unclean_leader_election": schema.BoolAttribute{Optional: true, Computed: true, PlanModifiers: keepBool,
				Description: "Elect an out-of-sync replica rather than stay offline."},
			"remote_storage": schema.BoolAttribute{Optional: true, Computed: true,
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown(),
					boolTurnedOff("Tiered storage cannot be turned off in place: false replaces the topic.")},
				Description: "Tiered storage: sealed segments go to the cluster's object store. Turning it off replaces the topic."},
			"local_retention_ms":    optionalInt("With remote_storage: how long records stay on the brokers' disks; -2: retention_ms, -1: unlimited."),
			"local_retention_bytes": optionalInt("With remote_storage: per partition, what stays on the brokers' disks; -2: retention_bytes, -1: unlimited."),
			"max_segment_bytes":     optionalInt("A segment is sealed (with remote_storage: uploaded) at this size; 1 MiB to 1 GiB."),
			"segment_ms":            optionalInt("... or at this age, in ms; 60000 to 30 days."),
			"status": schema.StringAttribute{Computed: true,
				PlanModifiers: []planmodifier.String{settling("pending", "provisioning")},
				Description: "`pending`, `provisioning`, `ready`, `failed` or `deleting`. A topic not ready (its create's wait " +
					"ran out or was interrupted) is updated by the next apply, which waits for it."},
		},
	}
}

func (r *topicResource) attrs() map[string]bool {
	var resp resource.SchemaResponse
	r.Schema(context.Background(), resource.SchemaRequest{}, &resp)
	return attrNames(resp.Schema)
}

func (r *topicResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan topicModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b := body{}
	b.str("tenant", plan.Tenant)
	b.str("name", plan.Name)
	b.i64("partitions", plan.Partitions)
	b.str("region", plan.Region)
	b.i64("replication_factor", plan.ReplicationFactor)
	topicConfig(b, plan)
	var created topicJSON
	if err := r.client.Post(ctx, "topics", b, &created); err != nil {
		addAPIError(&resp.Diagnostics, "Could not create the topic", err, r.attrs())
		return
	}
	// The row exists from now on: keep it in the state even if waiting fails, so a
	// later apply or destroy knows it.
	state := topicState(created)
	topic, err := r.waitReady(ctx, created.FullName)
	if topic != nil {
		state = topicState(*topic)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
	addCreateWait(&resp.Diagnostics, "The topic", err, r.attrs())
}

// topicConfig adds the configuration fields the plan sets.
func topicConfig(b body, plan topicModel) {
	b.i64("retention_ms", plan.RetentionMs)
	b.i64("retention_bytes", plan.RetentionBytes)
	b.i64("max_message_bytes", plan.MaxMessageBytes)
	b.str("durability", plan.Durability)
	b.i64("min_insync_replicas", plan.MinInsyncReplicas)
	b.boolean("unclean_leader_election", plan.UncleanLeaderElection)
	b.boolean("remote_storage", plan.RemoteStorage)
	b.i64("local_retention_ms", plan.LocalRetentionMs)
	b.i64("local_retention_bytes", plan.LocalRetentionBytes)
	b.i64("max_segment_bytes", plan.MaxSegmentBytes)
	b.i64("segment_ms", plan.SegmentMs)
}

// waitReady waits until the topic's current generation is applied (status ready); a
// topic that failed is an error naming the reason.
func (r *topicResource) waitReady(ctx context.Context, fullName string) (*topicJSON, error) {
	var topic topicJSON
	err := r.client.waitFor(ctx, "waiting for topic "+fullName, func() (bool, string, error) {
		if err := r.client.Get(ctx, "topics/"+escape(fullName), nil, &topic); err != nil {
			return false, "", err
		}
		state := fmt.Sprintf("status %s, generation %d observed %d", topic.Status, topic.Generation, topic.ObservedGeneration)
		if topic.Status == "failed" {
			return false, state, fmt.Errorf("topic %s failed: %s", fullName, topic.StatusReason)
		}
		return topic.Status == "ready" && topic.ObservedGeneration >= topic.Generation, state, nil
	})
	if topic.FullName == "" {
		return nil, err
	}
	return &topic, err
}

func topicState(t topicJSON) topicModel {
	return topicModel{
		ID:                    types.StringValue(t.FullName),
		Tenant:                types.StringValue(t.Tenant),
		Name:                  types.StringValue(t.Name),
		FullName:              types.StringValue(t.FullName),
		Region:                types.StringValue(t.Region),
		Cluster:               types.StringValue(t.Cluster),
		Partitions:            types.Int64Value(t.Partitions),
		ReplicationFactor:     types.Int64Value(t.ReplicationFactor),
		RetentionMs:           types.Int64Value(t.RetentionMs),
		RetentionBytes:        types.Int64Value(t.RetentionBytes),
		MaxMessageBytes:       types.Int64Value(t.MaxMessageBytes),
		Durability:            types.StringValue(t.Durability),
		MinInsyncReplicas:     types.Int64Value(t.MinInsyncReplicas),
		UncleanLeaderElection: types.BoolValue(t.UncleanLeaderElection),
		RemoteStorage:         types.BoolValue(t.RemoteStorage),
		LocalRetentionMs:      types.Int64Value(t.LocalRetentionMs),
		LocalRetentionBytes:   types.Int64Value(t.LocalRetentionBytes),
		MaxSegmentBytes:       types.Int64Value(t.MaxSegmentBytes),
		SegmentMs:             types.Int64Value(t.SegmentMs),
		Status:                types.StringValue(t.Status),
	}
}

func (r *topicResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state topicModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var topic topicJSON
	err := r.client.Get(ctx, "topics/"+escape(state.ID.ValueString()), nil, &topic)
	gone, err := r.client.Gone(ctx, err, topicTenant(state.Tenant, state.ID.ValueString()))
	if gone {
		resp.State.RemoveResource(ctx) // deleted outside Terraform: planned anew
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not read the topic", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, topicState(topic))...)
}

func (r *topicResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state topicModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := changes{body{}}
	c.i64("partitions", plan.Partitions, state.Partitions)
	c.i64("retention_ms", plan.RetentionMs, state.RetentionMs)
	c.i64("retention_bytes", plan.RetentionBytes, state.RetentionBytes)
	c.i64("max_message_bytes", plan.MaxMessageBytes, state.MaxMessageBytes)
	c.str("durability", plan.Durability, state.Durability)
	c.i64("min_insync_replicas", plan.MinInsyncReplicas, state.MinInsyncReplicas)
	c.boolean("unclean_leader_election", plan.UncleanLeaderElection, state.UncleanLeaderElection)
	c.boolean("remote_storage", plan.RemoteStorage, state.RemoteStorage)
	c.i64("local_retention_ms", plan.LocalRetentionMs, state.LocalRetentionMs)
	c.i64("local_retention_bytes", plan.LocalRetentionBytes, state.LocalRetentionBytes)
	c.i64("max_segment_bytes", plan.MaxSegmentBytes, state.MaxSegmentBytes)
	c.i64("segment_ms", plan.SegmentMs, state.SegmentMs)
	fullName := state.ID.ValueString()
	if len(c.body) > 0 {
		if err := r.client.Patch(ctx, "topics/"+escape(fullName), nil, c.body, nil); err != nil {
			addAPIError(&resp.Diagnostics, "Could not change the topic", err, r.attrs())
			return
		}
	}
	topic, err := r.waitReady(ctx, fullName)
	if topic != nil {
		resp.Diagnostics.Append(resp.State.Set(ctx, topicState(*topic))...)
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "The topic was changed but the change was not applied", err, r.attrs())
	}
}

func (r *topicResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state topicModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	path := "topics/" + escape(state.ID.ValueString())
	if _, err := r.client.Gone(ctx, r.client.Delete(ctx, path, nil), topicTenant(state.Tenant, state.ID.ValueString())); err != nil {
		addAPIError(&resp.Diagnostics, "Could not delete the topic", err, r.attrs())
		return
	}
	if err := waitGone(ctx, r.client, path, nil); err != nil {
		resp.Diagnostics.AddError("The topic was not deleted", err.Error())
	}
}

// ImportState takes the topic's full name, `<tenant>.<name>`.
func (r *topicResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if !strings.Contains(req.ID, ".") {
		resp.Diagnostics.AddError("Invalid import id", fmt.Sprintf("expected the topic's full name <tenant>.<name>, got %q", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
}

var _ resource.ResourceWithImportState = (*topicResource)(nil)
